"""An egress policy on Lima, on the limactl stand-in: Lima gives sand no place outside
the guest to enforce it yet, so the plan refuses the VM (``!``, located at the
``egress:`` that asks for it) and apply creates nothing, rather than an open VM."""

from __future__ import annotations

import json

from tests.backends.lima.test_fork_lima import calls
from tests.crash.test_crash_lima import Rig
from tests.machine_schemas import validate

GAP = "cannot be enforced on backend 'laptop': Lima gives sand no place outside the guest"


def test_a_vm_with_a_deny_policy_is_refused_and_not_created(tmp_path):
    rig = Rig(tmp_path)
    rig.write("  - name: a\n    egress: {domains: [github.com]}\n  - name: b\n")
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # Located at a's egress: (line 8 of the manifest the rig writes).
    assert f"{rig.manifest}:8:13: egress: deny except 1 domain, 0 cidrs on port 443 {GAP}" in (
        proc.stdout
    ), proc.stdout
    assert rig.vms() == ["b"]  # the VM without a policy is made as ever
    assert [c for c in calls(rig, "create", "clone", "start") if " a" in f" {c} "] == []


def test_a_policy_from_the_defaults_is_located_there(tmp_path):
    rig = Rig(tmp_path)
    rig.write("  - name: a\n")
    closed = "defaults: {egress: {cidrs: [10.0.0.0/8]}, "
    rig.manifest.write_text(rig.manifest.read_text().replace("defaults: {", closed))
    proc = rig.sand("plan")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{rig.manifest}:5:20: egress: deny except 0 domains, 1 cidr on port 443 {GAP}" in (
        proc.stdout
    ), proc.stdout
    assert rig.vms() == []


def test_an_allow_policy_is_made_as_any_vm(tmp_path):
    rig = Rig(tmp_path)
    rig.write("  - name: a\n    egress: {policy: allow}\n")
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vms() == ["a"]


def test_plan_json_and_status_show_the_refusal_within_their_schemas(tmp_path):
    rig = Rig(tmp_path)
    rig.write("  - name: a\n    egress: {domains: [github.com]}\n")
    plan = rig.sand("plan", "--json")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    document = json.loads(plan.stdout)
    validate("plan", document)
    (change,) = document["changes"]
    (blocker,) = change["blockers"]
    assert (change["action"], blocker["kind"]) == ("blocked", "egress")
    assert blocker["where"] == f"{rig.manifest}:8:13"
    assert change["desired"]["egress"].startswith("deny except 1 domain")
    status = json.loads(rig.sand("status", "--json").stdout)
    validate("status", status)
    assert [(v["vm"], v["action"], v["conditions"]["Synced"]) for v in status["vms"]] == [
        ("a", "blocked", False)
    ]
    assert rig.vms() == []
