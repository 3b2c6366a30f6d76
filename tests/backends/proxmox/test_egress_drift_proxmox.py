"""A VM's PVE firewall changed by hand (the GUI or the API) is drift: the next plan reads
each deny-policy VM's firewall back, shows what a hand changed as ``~ egress``
("changed outside sand: …"), and apply restores sand's options, rule, ipset and NIC flag,
against fakepve; VMs without a policy cost no request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sand.backends.proxmox.firewall import IPSET, RULE_COMMENT
from tests.backends.proxmox.test_cli import Sand
from tests.backends.proxmox.test_egress_proxmox import (
    CIDRS,
    DC_READ,
    LISTING,
    audit_and_switch_on,
    firewall_of,
    vm_path,
)
from tests.fakepve_rig.rig import FakePveRig

Conf = dict[str, Any]


@pytest.fixture
def run(rig: FakePveRig, tmp_path: Path) -> Sand:
    return Sand(rig, tmp_path)


def _applied(run: Sand, rig: FakePveRig, policy: dict[str, Any] = CIDRS) -> int:
    """One VM ``a`` with ``policy``, applied; its vmid."""
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": policy}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    return vm.vmid


def _as_sand_wrote(rig: FakePveRig, vmid: int) -> None:
    """What sand writes for CIDRS, read at fakepve's side."""
    fw = firewall_of(rig, vmid)
    opts = fw["options"]
    assert (opts["enable"], opts["policy_out"], opts["policy_in"], opts["dhcp"]) == (
        1, "DROP", "ACCEPT", 1,
    )  # fmt: skip
    assert sorted(e["cidr"] for e in fw["ipset"][IPSET]) == ["10.20.0.0/16", "192.0.2.7"]
    mine = [r for r in fw["rules"] if r.get("comment") == RULE_COMMENT]
    assert [(r["type"], r["action"], r["dest"], r["dport"], r["enable"]) for r in mine] == [
        ("out", "ACCEPT", f"+{IPSET}", "22,443", 1)
    ]
    vm = rig.vm(vmid)
    assert vm is not None
    net0 = vm.pending.get("net0") or vm.config["net0"]
    assert "firewall=1" in net0.split(",")


def _remove_rule(conf: Conf) -> None:
    conf["rules"][:] = [r for r in conf["rules"] if r.get("comment") != RULE_COMMENT]


def _add_entry(conf: Conf) -> None:
    conf["ipset"][IPSET].insert(0, {"cidr": "203.0.113.0/24"})


def _open_policy(conf: Conf) -> None:
    conf["options"]["policy_out"] = "ACCEPT"


def _switch_off(conf: Conf) -> None:
    conf["options"]["enable"] = 0


HAND_EDITS: dict[str, tuple[Callable[[Conf], None], str]] = {
    "rule deleted": (_remove_rule, "sand's rule removed"),
    "ipset entry added": (_add_entry, f"{IPSET} gained 203.0.113.0/24"),
    "policy_out ACCEPT": (_open_policy, "policy_out=ACCEPT (sand writes DROP)"),
    "firewall disabled": (_switch_off, "the VM's firewall is off"),
}


@pytest.mark.parametrize("edit", sorted(HAND_EDITS))
def test_a_firewall_changed_by_hand_is_drift_that_apply_restores(
    run: Sand,
    rig: FakePveRig,
    edit: str,
):
    vmid = _applied(run, rig)
    change, said = HAND_EDITS[edit]
    rig.run(lambda: change(rig.pve.firewall_config("vm", "pve1", vmid)))
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "# a (pve) has changed outside of sand" in plan.stdout
    assert f'~ egress = "changed outside sand: {said}" -> "deny except 0 domains' in plan.stdout
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    assert vm.vmid == vmid  # in place
    _as_sand_wrote(rig, vmid)
    quiet = run("plan", "--detailed-exitcode")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr


def test_a_nic_whose_firewall_flag_was_dropped_by_hand_gets_it_back(run: Sand, rig: FakePveRig):
    vmid = _applied(run, rig)

    def unfilter() -> None:
        vm = rig.pve.vm(vmid)
        for where in (vm.config, vm.pending):
            if "net0" in where:
                where["net0"] = ",".join(p for p in where["net0"].split(",") if p != "firewall=1")

    rig.run(unfilter)
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert '~ egress = "changed outside sand: net0 without firewall=1"' in plan.stdout
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    _as_sand_wrote(rig, vmid)
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_sands_ipset_removed_by_hand_is_made_again(run: Sand, rig: FakePveRig):
    vmid = _applied(run, rig)

    def remove() -> None:
        conf = rig.pve.firewall_config("vm", "pve1", vmid)
        _remove_rule(conf)  # PVE refuses to delete an ipset a rule refers to
        del conf["ipset"][IPSET]

    rig.run(remove)
    plan = run("plan")
    assert f"sand's rule removed; ipset {IPSET} removed" in plan.stdout, plan.stdout
    assert run("apply", "--auto-approve").returncode == 0
    _as_sand_wrote(rig, vmid)
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_an_operators_own_rule_is_not_drift(run: Sand, rig: FakePveRig):
    vmid = _applied(run, rig)
    mine = {"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "8080", "enable": 1}
    rig.run(lambda: rig.pve.firewall_config("vm", "pve1", vmid)["rules"].append(mine))
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr


def test_a_no_op_plan_reads_the_firewall_of_policy_vms_only(run: Sand, rig: FakePveRig):
    """The exact requests: the listing, the datacenter switch, and per VM with a deny
    policy its options, rules, ipset entries and config; nothing for the others."""
    audit_and_switch_on(rig)
    run.write(
        [
            {"name": "a", "egress": CIDRS},
            {"name": "b"},
            {"name": "c", "egress": {"policy": "allow"}},
            {"name": "d", "egress": CIDRS},
        ]
    )
    assert run("apply", "--auto-approve").returncode == 0
    ids = {vm.name: vm.vmid for vm in rig.vms()}
    rig.clear_log()
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    reads = [
        f"GET {vm_path(ids[name])}{tail} -> 200"
        for name in ("a", "d")
        for tail in (
            "/firewall/options",
            "/firewall/rules",
            f"/firewall/ipset/{IPSET}",
            "/config",
        )
    ]
    assert sorted(str(r) for r in rig.log) == sorted([LISTING, DC_READ, *reads])


def test_without_the_drift_read_a_no_op_plan_costs_the_same_at_any_size(run: Sand, rig: FakePveRig):
    """``egress_drift: false``: the listing and the datacenter switch, whatever the fleet;
    a firewall opened by hand then goes unseen (the price, docs/egress.md#drift), while a
    policy the manifest changes is still written whole."""
    audit_and_switch_on(rig)
    fleet = [{"name": f"vm-{i}", "egress": CIDRS} for i in range(3)]
    run.write(fleet, egress_drift=False)
    assert run("apply", "--auto-approve").returncode == 0
    vmid = next(vm.vmid for vm in rig.vms() if vm.name == "vm-0")
    rig.run(lambda: _open_policy(rig.pve.firewall_config("vm", "pve1", vmid)))
    rig.clear_log()
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert sorted(str(r) for r in rig.log) == sorted([LISTING, DC_READ])

    run.write([{**fleet[0], "egress": {**CIDRS, "ports": [443]}}, *fleet[1:]], egress_drift=False)
    assert run("apply", "--auto-approve").returncode == 0
    assert firewall_of(rig, vmid)["options"]["policy_out"] == "DROP"
