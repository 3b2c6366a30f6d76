"""An egress policy on Proxmox, against fakepve: the VM's PVE firewall written through
the API before its first start, a changed policy rewritten in place (a no-op plan's
requests: test_egress_drift_proxmox.py); what PVE cannot enforce (names,
a datacenter firewall off or unreadable) refused in the plan (``!``) with the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sand.backends.proxmox.firewall import IPSET
from tests.backends.proxmox.test_cli import Sand
from tests.fakepve_rig.rig import FakePveRig

CIDRS = {"cidrs": ["10.20.0.0/16", "192.0.2.7"], "ports": [443, 22]}
NAMES = {"domains": ["github.com"], "cidrs": ["10.20.0.0/16"]}
LISTING = "GET /cluster/resources?type=vm -> 200"
DC_READ = "GET /cluster/firewall/options -> 200"
PROXY = "192.0.2.1:3128"  # where this host's owner declared the proxy


@pytest.fixture
def run(rig: FakePveRig, tmp_path: Path) -> Sand:
    return Sand(rig, tmp_path)


def audit_and_switch_on(rig: FakePveRig) -> None:
    """What the operator does once: the read-only grant, the datacenter firewall on."""
    rig.grant(rig.token_id, "/", "Sys.Audit")
    rig.run(lambda: rig.pve.firewall_config("cluster")["options"].__setitem__("enable", 1))


def vm_path(vmid: int) -> str:
    return f"/nodes/pve1/qemu/{vmid}"


def firewall_of(rig: FakePveRig, vmid: int) -> dict[str, Any]:
    conf: dict[str, Any] = rig.run(rig.pve.firewall_config, "vm", "pve1", vmid)
    return conf


def test_a_vm_is_created_with_its_firewall_written_before_its_first_start(
    run: Sand, rig: FakePveRig
):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": CIDRS}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    assert "firewall=1" in vm.config["net0"].split(",")
    fw = firewall_of(rig, vm.vmid)
    opts = fw["options"]
    assert (opts["enable"], opts["policy_out"], opts["policy_in"], opts["dhcp"]) == (
        1, "DROP", "ACCEPT", 1,
    )  # fmt: skip
    # PVE writes a single address without its /32
    assert sorted(e["cidr"] for e in fw["ipset"][IPSET]) == ["10.20.0.0/16", "192.0.2.7"]
    (rule,) = fw["rules"]
    assert (rule["type"], rule["action"], rule["dest"], rule["proto"], rule["dport"]) == (
        "out", "ACCEPT", f"+{IPSET}", "tcp", "22,443",
    )  # fmt: skip
    assert rule["enable"] == 1  # a rule sent without it is stored disabled
    log = [str(r) for r in rig.log]
    start = next(i for i, r in enumerate(log) if r.startswith("POST") and "/status/start" in r)
    written = [i for i, r in enumerate(log) if "/firewall/" in r and not r.startswith("GET")]
    assert written and max(written) < start  # never started open
    # nor marked (the config write carries the marker that vouches for the policy)
    configured = next(i for i, r in enumerate(log) if r == f"PUT {vm_path(vm.vmid)}/config -> 200")
    assert max(written) < configured
    # options, ipset, one per cidr, one rule: as few requests as PVE takes them
    assert len(written) == 1 + 1 + 2 + 1


def test_a_changed_policy_rewrites_the_firewall_in_place_keeping_an_operators_rule(
    run: Sand, rig: FakePveRig
):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": CIDRS}])
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    mine = {"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "8080", "enable": 1}
    rules = rig.pve.firewall_config("vm", "pve1", vm.vmid)["rules"]
    rig.run(lambda: rules.append({**mine, "pos": 1}))
    run.write([{"name": "a", "egress": {"cidrs": ["198.51.100.0/24"]}}])
    plan = run("plan")
    assert '~ egress = "deny except 0 domains, 2 cidrs on ports 22,443 #' in plan.stdout
    assert '-> "deny except 0 domains, 1 cidr on port 443 #' in plan.stdout
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (after,) = rig.vms()
    assert after.vmid == vm.vmid  # in place
    fw = firewall_of(rig, vm.vmid)
    assert [e["cidr"] for e in fw["ipset"][IPSET]] == ["198.51.100.0/24"]
    assert [(r["type"], r["dport"]) for r in fw["rules"]] == [("out", "443"), ("in", "8080")]
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_dropping_the_policy_turns_the_vms_firewall_off(run: Sand, rig: FakePveRig):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": CIDRS}])
    assert run("apply", "--auto-approve").returncode == 0
    run.write([{"name": "a"}])
    plan = run("plan")
    assert '-> "allow"' in plan.stdout, plan.stdout
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    fw = firewall_of(rig, vm.vmid)
    assert (fw["options"]["enable"], fw["rules"], fw["ipset"]) == (0, [], {})
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_an_existing_vm_given_a_policy_gets_its_firewall(run: Sand, rig: FakePveRig):
    audit_and_switch_on(rig)
    run.write([{"name": "a"}])
    assert run("apply", "--auto-approve").returncode == 0
    run.write([{"name": "a", "egress": CIDRS}])
    plan = run("plan")
    assert '~ egress = "allow" -> "deny except 0 domains, 2 cidrs' in plan.stdout, plan.stdout
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    # Written to the running VM: PVE hotplugs a NIC's firewall flag (qemu-server's
    # vmconfig_update_net re-plugs the tap); fakepve keeps it pending.
    net0 = vm.pending.get("net0") or vm.config["net0"]
    assert "firewall=1" in net0.split(",")
    assert firewall_of(rig, vm.vmid)["options"]["policy_out"] == "DROP"
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_a_policy_with_domains_is_refused_without_a_declared_proxy(run: Sand, rig: FakePveRig):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": NAMES}])
    plan = run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "# a (pve) is blocked: it would be created" in plan.stdout
    told = " ".join(plan.stdout.replace("#", " ").split())
    assert "the PVE firewall matches addresses, not names, and no egress proxy is" in told
    assert "set egress_proxy (this host's address:port on the guests' route)" in told
    assert run("apply", "--auto-approve").returncode == 1
    assert rig.vms() == []


def test_with_a_declared_proxy_domains_are_created_with_a_rule_to_it_before_the_first_start(
    run: Sand, rig: FakePveRig, tmp_path: Path
):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": NAMES}], egress_proxy=PROXY)
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    fw = firewall_of(rig, vm.vmid)
    cidrs, proxy = fw["rules"]  # in their order: PVE numbers them by it
    assert (cidrs["dest"], cidrs["dport"]) == (f"+{IPSET}", "443")
    assert (proxy["type"], proxy["action"], proxy["dest"], proxy["proto"], proxy["dport"]) == (
        "out", "ACCEPT", "192.0.2.1", "tcp", "3128",
    )  # fmt: skip
    assert proxy["enable"] == 1
    log = [str(r) for r in rig.log]
    start = next(i for i, r in enumerate(log) if r.startswith("POST") and "/status/start" in r)
    written = [i for i, r in enumerate(log) if "/firewall/rules" in r and r.startswith("POST")]
    assert len(written) == 2 and max(written) < start  # never started open
    # The policy where the proxy reads it, on this host.
    policy = json.loads((tmp_path / "state/projects/demo/egress/pve.a.policy.json").read_text())
    assert (policy["vm"], policy["domains"], policy["ports"]) == ("a", ["github.com"], [443])
    # Read back by the next plan (docs/egress.md#drift): both rules are sand's, no drift.
    quiet = run("plan", "--detailed-exitcode")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr


def test_a_proxy_alone_is_the_only_way_out_of_a_policy_of_domains(run: Sand, rig: FakePveRig):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": {"domains": ["github.com"]}}], egress_proxy=PROXY)
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    fw = firewall_of(rig, vm.vmid)
    ((rule),) = fw["rules"]
    assert (rule["dest"], rule["dport"]) == ("192.0.2.1", "3128")
    assert not fw.get("ipset")
    # Gaining a CIDR later: the ipset and its rule, the proxy's kept.
    run.write(
        [{"name": "a", "egress": {"domains": ["github.com"], "cidrs": ["10.9.0.0/16"]}}],
        egress_proxy=PROXY,
    )
    again = run("apply", "--auto-approve")
    assert again.returncode == 0, again.stdout + again.stderr
    fw = firewall_of(rig, vm.vmid)
    assert sorted(r["dest"] for r in fw["rules"]) == [f"+{IPSET}", "192.0.2.1"]
    assert run("plan", "--detailed-exitcode").returncode == 0

    # The proxy's rule changed by hand (another port) is drift, and apply puts it back.
    def by_hand() -> None:
        held = rig.pve.firewall_config("vm", "pve1", vm.vmid)["rules"]
        next(r for r in held if r["dest"] == "192.0.2.1")["dport"] = "8080"

    rig.run(by_hand)
    drift = run("plan", "--detailed-exitcode")
    assert drift.returncode == 2 and "sand's rule changed (dport)" in drift.stdout, drift.stdout
    assert run("apply", "--auto-approve").returncode == 0
    fw = firewall_of(rig, vm.vmid)
    assert {r["dest"]: str(r["dport"]) for r in fw["rules"]}["192.0.2.1"] == "3128"


def test_a_declared_proxy_that_is_not_an_address_and_port_is_refused_where_written(
    run: Sand, rig: FakePveRig
):
    run.write([{"name": "a"}], egress_proxy="pve-host.lan:3128")
    told = run("validate")
    assert told.returncode == 1
    assert f"{run.manifest}:" in told.stderr and "egress_proxy" in told.stderr
    assert "is not ADDRESS:PORT" in told.stderr and "Traceback" not in told.stderr


def test_a_token_without_sys_audit_on_root_is_refused_with_the_grant_to_make(
    run: Sand, rig: FakePveRig
):
    run.write([{"name": "a", "egress": CIDRS}])
    plan = run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "the token cannot read whether the datacenter's firewall is on" in plan.stdout
    assert "pveum acl modify / --roles SandAudit" in plan.stdout
    assert "--propagate 0" in plan.stdout
    assert run("apply", "--auto-approve").returncode == 1
    assert rig.vms() == []


def test_the_datacenter_firewall_off_refuses_a_deny_policy(run: Sand, rig: FakePveRig):
    rig.grant(rig.token_id, "/", "Sys.Audit")
    run.write([{"name": "a", "egress": CIDRS}, {"name": "b"}])
    plan = run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "the datacenter's firewall is off, so PVE applies no VM's firewall" in plan.stdout
    assert "pvesh set /cluster/firewall/options --enable 1" in plan.stdout


def test_no_egress_no_datacenter_read(run: Sand, rig: FakePveRig):
    run.write([{"name": "a"}, {"name": "b", "egress": {"policy": "allow"}}])
    assert run("apply", "--auto-approve").returncode == 0
    rig.clear_log()
    assert run("plan", "--detailed-exitcode").returncode == 0
    assert [str(r) for r in rig.log] == [LISTING]


def test_a_changed_policy_costs_only_what_differs(run: Sand, rig: FakePveRig):
    """A CIDR gained, one lost and a port changed: the entries one by one and sand's rule
    updated where it stands, after one read each of the rules, the ipsets and the
    entries (PVE takes one entry or rule per request)."""
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": CIDRS}])
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    rig.clear_log()
    changed = {"cidrs": ["10.20.0.0/16", "198.51.100.0/24"], "ports": [443]}
    run.write([{"name": "a", "egress": changed}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    fw = f"{vm_path(vm.vmid)}/firewall"
    sent = [str(r) for r in rig.log if "/firewall/" in r.path and "/cluster/" not in r.path]
    assert sent == [
        f"PUT {fw}/options -> 200",
        f"GET {fw}/rules -> 200",
        f"GET {fw}/ipset -> 200",
        f"GET {fw}/ipset/{IPSET} -> 200",
        f"POST {fw}/ipset/{IPSET} -> 200",
        f"DELETE {fw}/ipset/{IPSET}/192.0.2.7 -> 200",
        f"PUT {fw}/rules/0 -> 200",
    ]
    got = firewall_of(rig, vm.vmid)
    assert sorted(e["cidr"] for e in got["ipset"][IPSET]) == ["10.20.0.0/16", "198.51.100.0/24"]
    (rule,) = got["rules"]
    assert (rule["dport"], rule["dest"], rule["enable"]) == ("443", f"+{IPSET}", 1)
    assert run("plan", "--detailed-exitcode").returncode == 0


def test_a_cidr_removed_by_its_network_leaves_the_others(run: Sand, rig: FakePveRig):
    audit_and_switch_on(rig)
    run.write([{"name": "a", "egress": CIDRS}])
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    run.write([{"name": "a", "egress": {"cidrs": ["192.0.2.7"], "ports": [443, 22]}}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e["cidr"] for e in firewall_of(rig, vm.vmid)["ipset"][IPSET]] == ["192.0.2.7"]
