"""An egress policy on Proxmox, against fakepve: until sand writes the PVE firewall, a
VM with a deny policy is refused in the plan (``!``, with the reason) and neither
created open nor recorded as converged; the plan costs its one listing as ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.proxmox.test_cli import Sand
from tests.fakepve_rig.rig import FakePveRig

CLOSED = {"domains": ["github.com"], "cidrs": ["10.20.0.0/16"]}
GAP = "cannot be enforced on backend 'pve': sand does not write the PVE firewall"


@pytest.fixture
def run(rig: FakePveRig, tmp_path: Path) -> Sand:
    return Sand(rig, tmp_path)


def test_a_new_vm_with_a_deny_policy_is_refused_and_nothing_is_sent(run: Sand, rig: FakePveRig):
    run.write([{"name": "a", "egress": CLOSED}])
    rig.clear_log()
    plan = run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "# a (pve) is blocked: it would be created" in plan.stdout
    assert f"egress: deny except 1 domain, 1 cidr on port 443 {GAP}" in plan.stdout
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]
    done = run("apply", "--auto-approve")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rig.vms() == []


def test_an_existing_vm_given_a_policy_is_refused_not_recorded(run: Sand, rig: FakePveRig):
    run.write([{"name": "a"}])
    assert run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    description = vm.config.get("description")
    run.write([{"name": "a", "egress": CLOSED}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"# a (pve, {vm.vmid}) is blocked: it would be updated in place" in done.stdout
    assert '~ egress = "not enforced" -> "deny except 1 domain, 1 cidr on port 443 #' in done.stdout
    assert "record the converged spec" not in done.stdout
    # The marker still holds the fingerprint without the policy: the next plan asks again.
    assert rig.vm(vm.vmid).config.get("description") == description  # type: ignore[union-attr]
