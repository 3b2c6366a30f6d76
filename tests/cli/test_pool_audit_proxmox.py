"""Pool.Audit: without it PVE leaves ``pool`` out of ``/cluster/resources`` rows
(pve-manager ``PVE::API2::Cluster`` ``resources``), and sand tells its VMs by that field.
A token that lacks it is refused before any write, with the fix, on both profiles;
``sand doctor`` names it. Checked on the far side: fakepve's state and request log."""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("pve_version", [8, 9])
FIX = "Pool.Audit on /pool/sand"


def writes(rig: FakePveRig) -> list[str]:
    return [str(r) for r in rig.log if r.method in ("POST", "PUT", "DELETE")]


def without_pool_audit(rig: FakePveRig) -> None:
    rig.run(lambda: rig.pve.acl.__setitem__(rig.token_id, []))
    rig.run(rig.grant_sand_privileges, rig.token_id, without=["Pool.Audit"])


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


@BOTH
def test_a_token_without_pool_audit_is_refused_before_the_first_create(
    sand, fakepve_factory, pve_version
):
    rig = fakepve_factory(pve_version=pve_version)
    without_pool_audit(rig)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert FIX in plan.stdout and "pveum role modify" in plan.stdout, plan.stdout
    rig.clear_log()
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 1, apply.stdout + apply.stderr
    assert writes(rig) == [] and rig.vms() == []
    doctor = sand.run("doctor")
    assert doctor.returncode == 1
    assert f"missing privilege {FIX}" in doctor.stdout, doctor.stdout


@BOTH
def test_losing_pool_audit_after_an_apply_names_the_fix_not_a_vm_in_no_pool(
    sand, fakepve_factory, pve_version
):
    rig = fakepve_factory(pve_version=pve_version)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    without_pool_audit(rig)
    rig.clear_log()
    for verb in (("plan",), ("apply", "--auto-approve")):
        run = sand.run(*verb)
        out = run.stdout + run.stderr
        assert run.returncode == 1, out
        assert FIX in out and "pveum role modify" in out, out
        assert "in no pool" not in out
    assert writes(rig) == []
    assert [vm.name for vm in rig.vms()] == ["a"]
