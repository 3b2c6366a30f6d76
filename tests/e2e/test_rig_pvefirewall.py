"""The rig's PVE firewall (``tests/rig/pvefirewall.py``) on a network namespace plugged
into a bridge by a veth, as a tap would be: what pve-firewall's switches do, with real
packets and in a second (the QEMU guest's proof: ``test_egress_proxmox_guest.py``)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.required import missing
from tests.rig._util import RigError, missing_tools, run
from tests.rig.pvefirewall import HostFirewall, Nic
from tests.rig.witness import Witness

# One worker for the module: each test's bridge takes the same host addresses, which two
# tests at once on two workers (--dist loadgroup) could not both hold.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("pvefirewall")]

HOST, ALLOWED, GUEST = "10.251.0.1", "10.251.0.3", "10.251.0.50"
CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(); s.settimeout(2)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('CONNECTED')\n"
    "except OSError as e:\n    print('BLOCKED', type(e).__name__)\n"
)


def deny(**options: Any) -> dict[str, Any]:
    """What sand writes for ``egress: {cidrs: [ALLOWED], ports: [443]}``."""
    return {
        "cluster": {"enable": 1},
        "vm": {
            "options": {"enable": 1, "policy_out": "DROP", "policy_in": "ACCEPT", "dhcp": 1,
                        "log_level_out": "info", **options},
            "rules": [{"type": "out", "action": "ACCEPT", "dest": "+sand-egress", "proto": "tcp",
                       "dport": "443", "enable": 1, "pos": 0}],
            "ipset": {"sand-egress": [{"cidr": ALLOWED}]},
        },
    }  # fmt: skip


@dataclass
class Plugged:
    firewall: HostFirewall
    nic: Nic
    ns: str
    witness: Witness

    def connect(self, dst: str, port: int) -> str:
        argv = ["ip", "netns", "exec", self.ns, "python3", "-c", CONNECT, dst, str(port)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout


@pytest.fixture
def plugged(tmp_path: Path) -> Iterator[Plugged]:
    absent = missing_tools(("nft", "ip"))
    if absent:
        missing(f"the rig's PVE firewall needs {', '.join(absent)} (run .ci/rig-setup.sh)")
    ident = secrets.token_hex(2)
    bridge, tap, ns = f"sfwbr{ident}", f"sfwtap{ident}", f"sfwns{ident}"
    run(["ip", "link", "add", bridge, "type", "bridge"])
    try:
        for address in (HOST, ALLOWED):
            run(["ip", "addr", "add", f"{address}/24", "dev", bridge])
        run(["ip", "link", "set", bridge, "up"])
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", tap, "type", "veth", "peer", "name", "eth0", "netns", ns])
        run(["ip", "link", "set", tap, "master", bridge, "up"])
        for argv in (["addr", "add", f"{GUEST}/24", "dev", "eth0"], ["link", "set", "eth0", "up"]):
            run(["ip", "-n", ns, *argv])
        mac = run(["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/address"]).stdout
        nic = Nic(100, 0, tap, mac.decode().strip())
        with HostFirewall(ident, bridge, tmp_path) as firewall, Witness() as witness:
            for address in (HOST, ALLOWED):
                witness.listen("tcp", address, 443)
            yield Plugged(firewall, nic, ns, witness)
    finally:
        run(["ip", "netns", "del", ns], check=False)
        run(["ip", "link", "del", bridge], check=False)


def test_the_deny_policy_lets_the_allowed_address_through_and_drops_and_logs_the_rest(
    plugged: Plugged,
) -> None:
    plugged.firewall.apply(100, [plugged.nic], deny())
    assert "CONNECTED" in plugged.connect(ALLOWED, 443)
    assert "BLOCKED TimeoutError" in plugged.connect(HOST, 443)
    assert plugged.witness.at(HOST, 443) == [] and plugged.witness.at(ALLOWED, 443) == [GUEST]
    lines = plugged.firewall.log(100)
    assert lines and all(" policy DROP: " in line and f"DST={HOST} " in line for line in lines)
    assert lines[0].startswith("100 6 tap100i0-OUT ")


def test_nothing_is_filtered_while_the_datacenters_firewall_or_the_vms_is_off(
    plugged: Plugged,
) -> None:
    """``PVE::Firewall::update`` applies no VM rule while the datacenter's is off;
    ``generate_tap_rules_direction`` none but ACCEPT while the VM's is."""
    off = deny()
    off["cluster"]["enable"] = 0
    plugged.firewall.apply(100, [plugged.nic], off)
    assert "CONNECTED" in plugged.connect(HOST, 443)
    plugged.firewall.apply(100, [plugged.nic], deny(enable=0))
    assert "CONNECTED" in plugged.connect(HOST, 443)
    plugged.firewall.apply(100, [plugged.nic], deny())  # on again: in force at once
    assert "BLOCKED TimeoutError" in plugged.connect(HOST, 443)
    plugged.firewall.remove(100)  # with the VM: gone
    assert "CONNECTED" in plugged.connect(HOST, 443)


def test_without_log_level_the_drop_is_not_logged(plugged: Plugged) -> None:
    plugged.firewall.apply(100, [plugged.nic], deny(log_level_out="nolog"))
    assert "BLOCKED TimeoutError" in plugged.connect(HOST, 443)
    assert plugged.firewall.log(100) == []


def test_what_the_rig_does_not_model_fails_rather_than_running_open(plugged: Plugged) -> None:
    for options in ({"policy_in": "DROP"}, {"ipfilter": 1}):
        with pytest.raises(RigError, match="VM 100: the rig"):
            plugged.firewall.apply(100, [plugged.nic], deny(**options))


def test_two_hypervisors_numbering_their_vms_alike_keep_to_their_own(
    plugged: Plugged, tmp_path: Path
) -> None:
    """Two tests' fakepves both call their first VM 101, and every hypervisor's table
    sees every bridged packet: another hypervisor's VM of the same vmid, whose policy
    allows nothing, must not drop this one's allowed traffic (it did, with marks made of
    the vmid alone, when two such tests ran at once)."""
    plugged.firewall.apply(100, [plugged.nic], deny())
    other = HostFirewall(secrets.token_hex(2), plugged.firewall.bridge, tmp_path / "other")
    (tmp_path / "other").mkdir()
    closed = deny()
    closed["vm"]["rules"], closed["vm"]["ipset"] = [], {}
    with other:
        assert other.slot != plugged.firewall.slot
        other.apply(100, [Nic(100, 0, "sfwnone", "02:00:00:00:00:01")], closed)
        assert "CONNECTED" in plugged.connect(ALLOWED, 443)
        assert "BLOCKED TimeoutError" in plugged.connect(HOST, 443)
