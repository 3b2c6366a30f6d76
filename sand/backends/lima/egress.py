"""A local Lima VM's egress: enforced in its QEMU process on this host (docs/egress.md#lima).

A VM with a deny policy has, in its instance directory, the policy file the proxy reads
(``sand-egress.json``) and, written at each start by sand, one QEMU shim script per
architecture; every ``limactl start`` sand runs for it sets ``QEMU_SYSTEM_<ARCH>`` to the
shim (``sand.egress.shim``), which restricts net0 and forwards the proxy. A start
without the shim (``limactl start`` by hand) boots the VM open: so each plan reads the
running QEMU's command line (``qemu.pid``, ``/proc/PID/cmdline``) and reports the policy
as enforced only when the shim's options are there; otherwise ``allow``, which a deny
policy turns into ``~ egress "allow" -> "deny ..."`` and a restart through the shim.

On a remote Lima host (``ssh:``) the QEMU runs there, where sand's proxy does not:
such a deny policy is refused in the plan (``REMOTE_GAP``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import sand
from sand.backends.lima.context import Ctx
from sand.desired import DesiredVM
from sand.egress.policy import PolicyFile, read_policy
from sand.egress.shim import enforced
from sand.manifest.egress import ALLOW, DENY
from sand.observed import Observation, ObservedVM
from sand.state.paths import project_dir, state_root

POLICY_FILE = "sand-egress.json"
QEMU_PID_FILE = "qemu.pid"  # Lima's ``-pidfile`` (pkg/limatype/filenames PIDFile("qemu"))
# The QEMU binaries Lima may run, by the variable that names each (``Exe()`` in qemu.go).
ARCHES = ("x86_64", "aarch64")
REMOTE_GAP = (
    "the VM's QEMU runs on the remote Lima host, where sand's egress proxy does not "
    "(a deny policy is enforced on local Lima only); docs/egress.md#lima"
)


def denies(vm: DesiredVM) -> bool:
    return vm.egress is not None and vm.egress.policy == DENY


def instance_dir(ctx: Ctx, name: str) -> Path | None:
    """Where Lima keeps ``name`` on this machine; None on a remote Lima host."""
    if ctx.runner.remote:
        return None
    home = ctx.lima_home or os.environ.get("LIMA_HOME") or os.path.expanduser("~/.lima")
    return Path(home) / name


def denial_log(ctx: Ctx, name: str) -> Path:
    """The host's log of what ``name``'s proxy refused (JSON lines)."""
    return project_dir(ctx.project) / "egress" / f"{ctx.name}.{name}.denied.jsonl"


def prepare(ctx: Ctx, vm: DesiredVM, name: str) -> None:
    """Before sand starts ``name`` as ``vm``: its policy file written for a deny policy,
    removed for none (the next start is then open)."""
    where = instance_dir(ctx, name)
    if where is None:
        return
    path = where / POLICY_FILE
    if not denies(vm):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    assert vm.egress is not None
    summary = str(vm.infra()["egress"])
    policy = PolicyFile.of(
        ctx.project, ctx.name, vm.name, summary, vm.egress, denial_log(ctx, vm.name)
    )
    _write_policy(path, policy)


def renamed(ctx: Ctx, name: str) -> None:
    """After ``limactl rename`` to ``name`` (a replacement made under a temporary name):
    its policy file names the VM, and its denial log, by the final name."""
    where = instance_dir(ctx, name)
    if where is None:
        return
    try:
        policy = read_policy(where / POLICY_FILE)
    except ValueError:
        return  # none: an open VM
    denials = str(denial_log(ctx, name))
    _write_policy(where / POLICY_FILE, replace(policy, vm=name, denials=denials))


def _write_policy(path: Path, policy: PolicyFile) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(policy.to_bytes())
    temp.chmod(0o600)
    os.replace(temp, path)


def start_env(ctx: Ctx, name: str) -> dict[str, str]:
    """The environment of a ``limactl start`` of ``name``: for a VM with a policy file,
    each ``QEMU_SYSTEM_<ARCH>`` pointed at a shim chaining to the QEMU this environment
    names (the variable's own value, else the binary on PATH)."""
    where = instance_dir(ctx, name)
    if where is None or not (where / POLICY_FILE).exists():
        return {}
    env: dict[str, str] = {}
    for arch in ARCHES:
        variable = f"QEMU_SYSTEM_{arch.upper()}"
        chained = os.environ.get(variable) or f"qemu-system-{arch}"
        shim = where / f"sand-qemu-{arch}"
        _write_shim(shim, where / POLICY_FILE, chained)
        env[variable] = str(shim)
    return env


def _write_shim(path: Path, policy: Path, chained: str) -> None:
    # The shim runs under Lima's host agent: it names this Python, this sand and this
    # state directory itself rather than trusting that environment to.
    root = str(Path(sand.__file__).resolve().parent.parent)
    body = (
        "#!/bin/sh\n"
        "# Written by sand at each start of this VM: its egress policy (docs/egress.md#lima).\n"
        f"PYTHONPATH={shlex.quote(root)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"SAND_STATE_DIR={shlex.quote(str(state_root()))}\n"
        "export PYTHONPATH SAND_STATE_DIR\n"
        f"exec {shlex.quote(sys.executable)} -m sand.egress.shim "
        f'{shlex.quote(str(policy))} {shlex.quote(chained)} "$@"\n'
    )
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(body, encoding="utf-8")
    temp.chmod(0o700)
    os.replace(temp, path)


def qemu_cmdline(where: Path) -> list[str] | None:
    """The running QEMU's arguments (its pid file, then ``/proc``); None when none runs."""
    try:
        pid = int((where / QEMU_PID_FILE).read_text().strip())
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] or None


def enforced_egress(ctx: Ctx, vm: ObservedVM) -> str:
    """What ``vm`` is held to now: its policy's summary when its running QEMU carries
    the shim's options for its policy file (or it is stopped, and sand's next start will
    add them), else ``allow``."""
    where = instance_dir(ctx, vm.identity)
    if where is None:
        return ALLOW
    path = where / POLICY_FILE
    try:
        policy = read_policy(path)
    except ValueError:
        return ALLOW
    if vm.power == "stopped":
        return policy.summary
    cmdline = qemu_cmdline(where)
    return policy.summary if cmdline and enforced(cmdline, str(path)) else ALLOW


def observe(ctx: Ctx, seen: Observation, desired: Sequence[DesiredVM]) -> Observation:
    """The listing with each wanted-closed VM's egress as enforced now; on a remote
    Lima host, the reason a deny policy cannot be enforced there."""
    wanted = {vm.name for vm in desired if denies(vm) and vm.backend == ctx.name}
    if seen.unknown_reason:
        return seen
    if ctx.runner.remote:
        return replace(seen, egress_gap=REMOTE_GAP) if wanted else seen
    return replace(seen, vms=tuple(_with_egress(ctx, vm, wanted) for vm in seen.vms))


def _with_egress(ctx: Ctx, vm: ObservedVM, wanted: set[str]) -> ObservedVM:
    # A VM that holds a policy file is read too: a policy the manifest dropped shows
    # as ``~ egress "deny ..." -> "allow"`` until sand restarts it open.
    where = instance_dir(ctx, vm.identity)
    if vm.name in wanted or (where is not None and (where / POLICY_FILE).exists()):
        return replace(vm, egress=enforced_egress(ctx, vm))
    return vm
