"""Egress on Proxmox with real packets: one real guest (QEMU, TCG) behind a fakepve VM that
``sand apply`` made with a deny policy, the VM's PVE firewall applied on the host as
pve-firewall applies it (``tests/rig/pvefirewall.py``), and root in the guest trying to get
out every way it can.

The policy allows one address on port 443, where the rig's token-protected HTTPS git server
listens: a clone from it works. Every other attempt fails, each its own test, with a
listener (``tests/rig/witness.py``) at the destination that shows nothing arrived, and the
host's firewall log (netlink, in pvefw-logger's format, also served at
``GET …/qemu/{vmid}/firewall/log``) naming the VM, the destination and the time. One boot
for the whole module.
"""

from __future__ import annotations

import ipaddress
import os
import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.backends.proxmox.test_fidelity import Api
from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig
from tests.required import missing
from tests.rig._util import missing_tools, run
from tests.rig.gitserver import GitServer
from tests.rig.tlscert import self_signed
from tests.rig.witness import Witness

pytestmark = [pytest.mark.e2e, pytest.mark.tcg, pytest.mark.timeout(1800)]

LINK_LOCAL = "fe80::5a4e:1"  # the host's own link-local address on the guests' bridge
METADATA = "169.254.169.254"
BEYOND = "203.0.113.9"  # an address no route of the guest's reaches until it adds one
# A TCP connect's outcome, as the guest's root sees it: a drop is a timeout (a refusal would
# mean the packet arrived and the host answered).
CONNECT = """
import socket, sys
family = socket.AF_INET6 if ":" in {dst!r} else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(3)
if {src!r}:
    s.bind(({src!r}, 0))
try:
    s.connect(({dst!r}, {port}, 0, {scope}) if family == socket.AF_INET6 else ({dst!r}, {port}))
    print("CONNECTED")
except OSError as e:
    print("BLOCKED", type(e).__name__, e)
"""


@dataclass
class Egress:
    rig: FakePveRig
    hv: Any
    vmid: int
    guest: str  # the guest's address (DHCP)
    user: str
    host: str  # the host's address on the bridge (the node's own)
    allowed: str  # the one address the policy allows (the git server's)
    ula: str  # the host's IPv6 ULA on the bridge
    witness: Witness
    git: GitServer
    cafile: str
    sand: Sand
    since: float = 0.0  # when the last probe began: a denial logged before is another's

    def ssh(
        self, *argv: str, stdin: str = "", timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-i", str(self.rig.identity), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR", f"{self.user}@{self.guest}",
             "--", *argv],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def root(self, shell: str = "", python: str = "") -> str:
        """``shell`` then ``python`` (a script) as root in the guest; their output."""
        self.since = time.time()
        script = f"set -e\n{shell}\npython3 - <<'PYEOF'\n{python}\nPYEOF\n" if python else shell
        done = self.ssh("sudo", "-n", "bash", "-s", stdin=script)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def connect(
        self, dst: str, port: int, *, src: str = "", scope: int = 0, shell: str = ""
    ) -> str:
        return self.root(shell, CONNECT.format(dst=dst, port=port, src=src, scope=scope))

    def denied(self, dst: str, port: int | None = None, proto: str = "TCP") -> str:
        """The host's log line for a dropped packet of the VM to ``dst`` (waited for: the
        reader thread takes it off the netlink socket)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = [
                d.line()
                for d in self.hv.firewall.reader.of(self.vmid)
                if d.at >= self.since - 0.5
                and (d.dst, d.proto) == (dst, proto)
                and (port is None or d.dport == port)
            ]
            if found:
                return found[-1]
            time.sleep(0.1)
        log = "\n".join(self.hv.firewall.log(self.vmid))
        raise AssertionError(f"no denial of {proto} to {dst}:{port} since the probe in\n{log}")


def _write(sand: Sand, rig: FakePveRig, allowed: str, ports: list[int]) -> None:
    vm = {"name": "eg-1", "memory": "1GiB", "egress": {"cidrs": [allowed], "ports": ports}}
    sand.write(rig.manifest([vm], derive_bases=False))


def _boot(sand: Sand, rig: FakePveRig, hv: Any, allowed: str) -> tuple[int, str]:
    """``sand apply`` of one VM with the deny policy; its vmid and address once SSH answers."""
    _write(sand, rig, allowed, [443])
    done = sand.run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr + hv.consoles()
    (vm,) = rig.vms_named("eg-1")
    m = hv.machine(vm.vmid)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        ip = hv.leases().get(m.mac)
        if ip and subprocess.run(
            ["ssh", "-i", str(rig.identity), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             f"{vm.config['ciuser']}@{ip}", "true"],
            capture_output=True, check=False, timeout=60,
        ).returncode == 0:  # fmt: skip
            return vm.vmid, ip
        time.sleep(2)
    raise AssertionError("the guest never answered SSH\n" + hv.consoles())


@pytest.fixture(scope="module")
def egress(tmp_path_factory: pytest.TempPathFactory, fakepve_rig_pki: Any) -> Iterator[Egress]:
    from tests.rig import pveimage
    from tests.rig.pveguests import REQUIRED_TOOLS, QemuHypervisor, cleanup_stale

    absent = missing_tools((*REQUIRED_TOOLS, "nft"))
    if absent:
        missing(f"the Proxmox egress rig needs {', '.join(absent)} (run .ci/rig-setup.sh)")
    cleanup_stale()
    image = pveimage.build()
    tmp = tmp_path_factory.mktemp("egress-pve")
    rig = FakePveRig(fakepve_rig_pki, tmp / "fakepve")
    rig.set_time_scale(0.01)
    # The operator's part: the datacenter's firewall on, sand's token may read that.
    rig.grant(rig.token_id, "/", "Sys.Audit")
    rig.run(lambda: rig.pve.firewall_config("cluster")["options"].__setitem__("enable", 1))
    started = time.monotonic()
    with QemuHypervisor(image, firewall=True) as hv, Witness() as witness:
        rig.run(setattr, rig.pve, "hypervisor", hv)
        hosts = [str(h) for h in hv.network.hosts()]
        host, allowed = hosts[0], hosts[2]
        ula = str(ipaddress.ip_address(f"fd5a:{hv.id}::1"))
        for address in (f"{allowed}/32", f"{ula}/64", f"{LINK_LOCAL}/64", f"{METADATA}/32"):
            run(["ip", "addr", "add", address, "dev", hv.bridge, "nodad"])
        cert, key = self_signed(tmp, allowed)
        git = GitServer(
            f"rig-egress-{os.urandom(8).hex()}", host=allowed, port=443, tls=(cert, key)
        )
        git.start()
        git.create_repo("app", {"README.md": "through the one allowed address\n"})
        scope = int(Path(f"/sys/class/net/{hv.bridge}/ifindex").read_text())
        for proto, address, port in (
            ("tcp", host, 443), ("tcp", host, 53), ("udp", host, 53), ("tcp", host, 8006),
            ("tcp", host, 22), ("tcp", allowed, 8443), ("tcp", ula, 443), ("tcp", METADATA, 80),
        ):  # fmt: skip
            witness.listen(proto, address, port)
        witness.listen("tcp", LINK_LOCAL, 443, scope)
        try:
            sand = Sand(tmp)
            vmid, ip = _boot(sand, rig, hv, allowed)
            user = str(rig.vms_named("eg-1")[0].config["ciuser"])
            print(f"boot to SSH {time.monotonic() - started:.0f}s, load {os.getloadavg()}")
            yield Egress(rig, hv, vmid, ip, user, host, allowed, ula, witness, git, cert, sand)
        finally:
            git.stop()
            rig.run(setattr, rig.pve, "hypervisor", None)
            rig.stop()


def test_the_vm_was_started_with_its_firewall_in_force_on_every_nic(egress: Egress) -> None:
    (vm,) = egress.rig.vms_named("eg-1")
    nics = [k for k in vm.config if k.startswith("net")]
    assert nics and all("firewall=1" in str(vm.config[k]).split(",") for k in nics)
    ruleset = egress.hv.firewall.script.read_text()
    assert f"tap{egress.vmid}i0-OUT" in ruleset and "policy DROP" in ruleset


def test_an_https_git_clone_from_the_allowed_address_works(egress: Egress) -> None:
    egress.ssh("sh", "-c", "cat > /tmp/rig-ca.pem", stdin=Path(egress.cafile).read_text())
    clone = f"""
import os, subprocess
env = dict(os.environ, GIT_CONFIG_COUNT="2", GIT_CONFIG_KEY_0="http.sslCAInfo",
           GIT_CONFIG_VALUE_0="/tmp/rig-ca.pem", GIT_CONFIG_KEY_1="http.extraHeader",
           GIT_CONFIG_VALUE_1="Authorization: Basic " + __import__("base64").b64encode(
               b"x:{egress.git.token}").decode())
url = {egress.git.url_for("app")!r}
subprocess.run(["git", "clone", "-q", url, "/tmp/app"], env=env, check=True)
print(open("/tmp/app/README.md").read())
"""
    assert "through the one allowed address" in egress.root("rm -rf /tmp/app", clone)
    assert not [
        line for line in egress.hv.firewall.log(egress.vmid) if f"DST={egress.allowed} " in line
    ]


def _refused(egress: Egress, out: str, dst: str, port: int) -> str:
    assert "BLOCKED TimeoutError" in out, out
    assert egress.witness.at(dst, port) == []
    line = egress.denied(dst, port)
    assert line.startswith(f"{egress.vmid} 6 tap{egress.vmid}i0-OUT ") and "policy DROP: " in line
    return line


def test_a_disallowed_address_direct_is_dropped_and_logged(egress: Egress) -> None:
    line = _refused(egress, egress.connect(egress.host, 443), egress.host, 443)
    assert f"SRC={egress.guest} " in line
    # The same line through the API, as PVE serves it (VM.Console on the VM).
    api = Api(egress.rig, egress.rig.add_token("root@pam!log", acl="root"))
    status, lines = api.call("GET", f"nodes/pve1/qemu/{egress.vmid}/firewall/log", limit=500)
    assert status == 200 and line in [entry["t"] for entry in lines]


def test_another_resolver_over_udp_53(egress: Egress) -> None:
    query = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
query = "12340100000100000000000006676974687562036e65740000010001"  # github.net A
s.sendto(bytes.fromhex(query), ({egress.host!r}, 53))
try:
    print("ANSWERED", s.recvfrom(512))
except OSError as e:
    print("BLOCKED", type(e).__name__)
"""
    assert "BLOCKED TimeoutError" in egress.root(python=query)
    egress.denied(egress.host, 53, "UDP")
    assert egress.witness.at(egress.host, 53) == []


def test_another_resolver_over_tcp_53(egress: Egress) -> None:
    _refused(egress, egress.connect(egress.host, 53), egress.host, 53)


def test_dns_over_https_to_the_allowed_address_on_another_port(egress: Egress) -> None:
    _refused(egress, egress.connect(egress.allowed, 8443), egress.allowed, 8443)


def test_dns_over_https_to_another_address_with_an_allowed_name(egress: Egress) -> None:
    """SNI and Host say an allowed name; the address is another: the firewall sees the address."""
    out = egress.root(
        f"curl -sS --max-time 3 --resolve github.com:443:{egress.host} "
        "-H 'accept: application/dns-message' https://github.com/dns-query "
        "&& echo REACHED || echo BLOCKED"
    )
    assert "BLOCKED" in out and "REACHED" not in out
    assert egress.witness.at(egress.host, 443) == []
    egress.denied(egress.host, 443)


def test_ipv6_to_the_hosts_unique_local_address(egress: Egress) -> None:
    guest_ula = egress.ula.replace("::1", "::2")
    add = f"ip -6 addr replace {guest_ula}/64 dev eth0 nodad"
    _refused(egress, egress.connect(egress.ula, 443, shell=add), egress.ula, 443)


def test_ipv6_to_the_hosts_link_local_address(egress: Egress) -> None:
    index = egress.root("cat /sys/class/net/eth0/ifindex").strip()
    out = egress.connect(LINK_LOCAL, 443, scope=int(index))
    _refused(egress, out, LINK_LOCAL, 443)


def test_icmp_echo_gets_no_answer(egress: Egress) -> None:
    ping = f"""
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(3)
body = struct.pack("!BBHHH", 8, 0, 0, 77, 1) + b"sand"
total = sum(struct.unpack("!%dH" % (len(body) // 2), body))
total = (total >> 16) + (total & 0xFFFF); total += total >> 16
s.sendto(body[:2] + struct.pack("!H", ~total & 0xFFFF) + body[4:], ({egress.host!r}, 0))
try:
    while True:
        data, peer = s.recvfrom(512)
        if data[20] == 0:
            print("ANSWERED", peer); break
except OSError as e:
    print("BLOCKED", type(e).__name__)
"""
    assert "BLOCKED TimeoutError" in egress.root(python=ping)
    egress.denied(egress.host, proto="ICMP")


def test_an_address_of_its_own_choosing_is_dropped_too(egress: Egress) -> None:
    """The chain is matched on the tap, not the source address (no ipfilter)."""
    spoof = str(ipaddress.ip_address(egress.host) + 77)
    add = f"ip addr replace {spoof}/24 dev eth0"
    line = _refused(
        egress, egress.connect(egress.host, 443, src=spoof, shell=add), egress.host, 443
    )
    assert f"SRC={spoof} " in line


def test_a_route_of_its_own_beyond_the_bridge(egress: Egress) -> None:
    route = f"ip route replace {BEYOND}/32 via {egress.host} dev eth0"
    assert "BLOCKED TimeoutError" in egress.connect(BEYOND, 443, shell=route)
    egress.denied(BEYOND, 443)


def test_the_guest_flushing_its_own_firewall_changes_nothing(egress: Egress) -> None:
    flush = (
        "iptables -P OUTPUT ACCEPT; iptables -F; iptables -t nat -F; iptables -t mangle -F; "
        "ip6tables -P OUTPUT ACCEPT; ip6tables -F"
    )
    _refused(egress, egress.connect(egress.host, 22, shell=flush), egress.host, 22)


def test_the_backend_hosts_api_port(egress: Egress) -> None:
    _refused(egress, egress.connect(egress.host, 8006), egress.host, 8006)


def test_the_backend_hosts_ssh(egress: Egress) -> None:
    _refused(egress, egress.connect(egress.host, 22), egress.host, 22)


def test_the_metadata_address(egress: Egress) -> None:
    route = f"ip route replace {METADATA}/32 dev eth0"
    _refused(egress, egress.connect(METADATA, 80, shell=route), METADATA, 80)


def test_udp_to_a_random_port(egress: Egress) -> None:
    port = random.randrange(20000, 60000)
    egress.witness.listen("udp", egress.host, port)
    send = f"""
import socket
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"secret", ({egress.host!r}, {port}))
print("SENT")
"""
    assert "SENT" in egress.root(python=send)
    egress.denied(egress.host, port, "UDP")  # dropped where it would have passed
    assert egress.witness.at(egress.host, port) == []


def test_a_macvlan_of_its_own_with_another_mac_reaches_not_even_the_allowed_address(
    egress: Egress,
) -> None:
    """A sub-interface with a MAC of its own: pve-firewall's ebtables filter
    (``generate_tap_layer2filter``, ``macfilter``) drops its frames, unlogged (counted here)."""
    before = egress.hv.firewall.foreign_macs_dropped(egress.vmid)
    mine = str(ipaddress.ip_address(egress.host) + 88)
    add = (
        "ip link del mv0 2>/dev/null || true; ip link add mv0 link eth0 type macvlan mode bridge; "
        f"ip addr add {mine}/32 dev mv0; ip link set mv0 up; "
        f"ip route replace {egress.allowed}/32 dev mv0 src {mine}"
    )
    out = egress.connect(egress.allowed, 443, src=mine, shell=add)
    egress.root(f"ip route del {egress.allowed}/32 dev mv0; ip link del mv0")
    assert "CONNECTED" not in out and "BLOCKED" in out, out
    assert egress.hv.firewall.foreign_macs_dropped(egress.vmid) > before


def test_a_changed_policy_is_in_force_as_soon_as_sand_writes_it(egress: Egress) -> None:
    """``~ egress`` rewrites the running VM's firewall through the API; the rig applies
    each write as pve-firewall's update loop applies a changed ``<vmid>.fw``. (Last: it
    opens a port the tests above find closed.)"""
    assert "BLOCKED TimeoutError" in egress.connect(egress.allowed, 8443)
    _write(egress.sand, egress.rig, egress.allowed, [443, 8443])
    done = egress.sand.run("apply", "--auto-approve")
    assert done.returncode == 0 and "egress" in done.stdout, done.stdout + done.stderr
    assert "CONNECTED" in egress.connect(egress.allowed, 8443)
    assert egress.witness.at(egress.allowed, 8443) == [egress.guest]


def test_a_firewall_opened_by_hand_is_closed_again_by_the_next_apply(egress: Egress) -> None:
    """A person sets ``policy_out=ACCEPT`` on the VM's firewall (the GUI's API call): the
    rig applies it as pve-firewall's update loop would, and the guest gets out; the next
    plan shows it as drift, and apply closes the VM again (docs/egress.md#drift). (Last:
    it opens the VM for a while.)"""
    dst, port = egress.host, 443
    assert "BLOCKED TimeoutError" in egress.connect(dst, port)
    (vm,) = egress.rig.vms_named("eg-1")
    options = f"nodes/{vm.node}/qemu/{vm.vmid}/firewall/options"
    assert Api(egress.rig).call("PUT", options, policy_out="ACCEPT")[0] == 200
    assert "CONNECTED" in egress.connect(dst, port)
    assert egress.witness.at(dst, port) == [egress.guest]  # it got out
    plan = egress.sand.run("plan")
    assert "changed outside sand: policy_out=ACCEPT" in plan.stdout, plan.stdout + plan.stderr
    done = egress.sand.run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BLOCKED TimeoutError" in egress.connect(dst, port)
    assert egress.witness.at(dst, port) == [egress.guest]  # nothing more arrived
    assert f"DST={dst}" in egress.denied(dst, port)
