"""The QEMU shim: the command Lima runs as ``qemu-system-*`` for a VM with a deny policy.

Lima builds the QEMU command line itself (``pkg/driver/qemu/qemu.go``: the VM's first
NIC is ``-netdev user,id=net0,net=192.168.5.0/24,dhcpstart=...,hostfwd=tcp:...-:22``)
and runs the binary ``$QEMU_SYSTEM_<ARCH>`` names (``Exe()``). sand starts such a VM
with that variable pointing at a script that runs this module, which adds to net0
``restrict=on`` (the guest then reaches nothing but the hostfwds, Lima's SSH, and the
guestfwds) and two ``guestfwd``s, each run on the host for every connection the guest
opens to its address: the egress proxy at :data:`PROXY_ADDRESS` (``sand.egress.proxy``)
and the credential broker's relay (``sand.egress.relay``), then execs the QEMU
the environment would have run otherwise. Every other QEMU call Lima makes (``-version``,
``-netdev help``, ``-machine help``...) passes through untouched.

A VM launch with any other network device (a second NIC, a socket or vmnet network)
is refused: it would be a way out the proxy never sees.

Usage: ``python -m sand.egress.shim POLICY_FILE CHAINED_QEMU QEMU_ARGS...``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence

from sand.broker.access import RESTRICTED_LIMA_ADDRESS, RESTRICTED_LIMA_PORT

# Lima's user-mode network (192.168.5.0/24): .2 is the host, .3 slirp's DNS, .15 the
# guest (``pkg/networks``). The proxy takes a free address of it.
PROXY_ADDRESS = "192.168.5.4"
PROXY_PORT = 3128
PROXY_URL = f"http://{PROXY_ADDRESS}:{PROXY_PORT}"
PROXY_MODULE = "sand.egress.proxy"
RELAY_MODULE = "sand.egress.relay"


class NotEnforceable(Exception):
    """The launch would give the guest a way out the proxy does not see."""


def forward_command(python: str, module: str, policy_file: str) -> str:
    """A guestfwd's ``cmd:``: split by libslirp as a shell would (no shell runs), its
    commas doubled because QEMU's option parser splits on single ones."""
    return shlex.join([python, "-m", module, policy_file]).replace(",", ",,")


def _netdevs(argv: Sequence[str]) -> list[int]:
    return [i + 1 for i, a in enumerate(argv[:-1]) if a == "-netdev"]


def _options(value: str) -> list[str]:
    """A ``-netdev`` value's options, split on single commas (``,,`` is a comma)."""
    return value.replace(",,", "\0").split(",")


def rewrite(argv: Sequence[str], python: str, policy_file: str) -> list[str]:
    """Lima's QEMU arguments with net0 restricted and the proxy forwarded; unchanged
    for a call that starts no VM."""
    out = list(argv)
    launches = [i for i in _netdevs(argv) if argv[i] != "help"]
    if not launches:
        return out
    for i in launches:
        opts = _options(argv[i])
        if opts[0] != "user" or "id=net0" not in opts:
            raise NotEnforceable(f"network device {argv[i].split(',')[0]!r} bypasses the proxy")
        if any(o.startswith(("restrict=", "guestfwd=")) for o in opts):
            raise NotEnforceable("net0 already has restrict or guestfwd options")
    if len(launches) != 1:
        raise NotEnforceable("more than one network device")
    proxy = forward_command(python, PROXY_MODULE, policy_file)
    broker = forward_command(python, RELAY_MODULE, policy_file)
    out[launches[0]] = (
        f"{argv[launches[0]]},restrict=on,"
        f"guestfwd=tcp:{RESTRICTED_LIMA_ADDRESS}:{RESTRICTED_LIMA_PORT}-cmd:{broker},"
        f"guestfwd=tcp:{PROXY_ADDRESS}:{PROXY_PORT}-cmd:{proxy}"
    )
    return out


def enforced(cmdline: Sequence[str], policy_file: str) -> bool:
    """Whether a running QEMU's command line is one this shim made for ``policy_file``:
    one network device, net0, restricted, forwarding to the proxy with that policy."""
    devices = _netdevs(cmdline)
    if len(devices) != 1:
        return False
    opts = _options(cmdline[devices[0]])
    if opts[0] != "user" or "id=net0" not in opts or "restrict=on" not in opts:
        return False
    wanted = f"guestfwd=tcp:{PROXY_ADDRESS}:{PROXY_PORT}-cmd:"
    for opt in opts:
        if opt.startswith(wanted):
            words = shlex.split(opt[len(wanted) :].replace("\0", ","))
            return words[1:] == ["-m", PROXY_MODULE, policy_file]
    return False


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: python -m sand.egress.shim POLICY_FILE CHAINED_QEMU ARGS...\n")
        return 2
    policy_file, chained, args = argv[1], argv[2], argv[3:]
    try:
        rewritten = rewrite(args, sys.executable, policy_file)
    except NotEnforceable as exc:
        sys.stderr.write(f"sand: refusing to start a VM with an egress policy: {exc}\n")
        return 1
    words = shlex.split(chained)
    exe = shutil.which(words[0])
    if exe is None:
        sys.stderr.write(f"sand: {words[0]!r} not found (the QEMU this shim chains to)\n")
        return 127
    os.execv(exe, [exe, *words[1:], *rewritten])
    return 127  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
