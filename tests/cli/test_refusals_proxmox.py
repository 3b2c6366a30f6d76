"""What a real PVE refuses (the rig's fidelity layer, tests/fakepve_rig/README.md), met by
sand before its first write: the plan blocks it with the fix, apply writes nothing, and
``sand doctor`` names it. Checked on the far side: fakepve's state and request log."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig
from tests.machine_schemas import validate

BOTH = pytest.mark.parametrize("pve_version", [8, 9])


def writes(rig: FakePveRig) -> list[str]:
    return [str(r) for r in rig.log if r.method in ("POST", "PUT", "DELETE")]


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


# --- P2: a cross-node clone of a template on local storage --------------------------------


@BOTH
def test_cross_node_clone_from_local_storage_is_blocked(sand, fakepve_factory, pve_version):
    rig = fakepve_factory(nodes=("pve1", "pve2"), pve_version=pve_version)
    sand.write(rig.manifest([{"name": "far", "memory": "1GiB", "node": "pve2"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert '! vm "far"' in plan.stdout
    assert "'local-lvm', which is not shared storage" in plan.stdout
    assert "cannot clone it to node pve2" in plan.stdout
    rig.clear_log()
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 1
    assert rig.count("POST", contains="/clone") == 0 and rig.vms() == []
    doctor = sand.run("doctor")
    assert "cloned on node pve1 only" in doctor.stdout, doctor.stdout


def test_cross_node_clone_from_local_storage_is_placed_on_the_templates_node(sand, fakepve_factory):
    rig = fakepve_factory(nodes=("pve1", "pve2"))
    # Free-memory placement alone spreads three VMs over both nodes.
    sand.write(rig.manifest([{"name": f"vm-{i}", "memory": "1GiB"} for i in range(3)]))
    plan = sand.run("plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "placed on node pve1" in plan.stdout + plan.stderr
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert sorted(vm.node for vm in rig.vms()) == ["pve1"] * 3
    assert all("target" not in r.query for r in rig.requests("POST", contains="/clone"))


def test_cross_node_clone_from_shared_storage_is_not_blocked(sand, fakepve_factory):
    rig = fakepve_factory(nodes=("pve1", "pve2"), shared_storage=True)
    sand.write(rig.manifest([{"name": "far", "memory": "1GiB", "node": "pve2"}]))
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert [vm.node for vm in rig.vms()] == ["pve2"]


# --- P3: SDN.Use on the bridge ---------------------------------------------------------------


@BOTH
def test_bridge_without_sdn_use_is_blocked_before_any_write(sand, fakepve_factory, pve_version):
    rig = fakepve_factory(pve_version=pve_version)
    rig.run(lambda: rig.pve.acl.__setitem__(rig.token_id, []))
    rig.run(rig.grant_sand_privileges, rig.token_id, without=["SDN.Use"])
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "SDN.Use on /sdn/zones/localnetwork/vmbr0" in plan.stdout
    rig.clear_log()
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert writes(rig) == [] and rig.vms() == []
    doctor = sand.run("doctor")
    assert "missing privilege SDN.Use on /sdn/zones/localnetwork/vmbr0" in doctor.stdout


# --- P4: user-tag-access ------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("allow", ["list", "none"])
def test_tags_the_token_cannot_create_are_blocked(sand, fakepve_factory, pve_version, allow):
    rig = fakepve_factory(pve_version=pve_version)
    rig.set_user_tag_access(allow)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "user-tag-access" in plan.stdout and "user-allow=free" in plan.stdout
    rig.clear_log()
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert writes(rig) == [] and rig.vms() == []
    doctor = sand.run("doctor")
    assert doctor.returncode == 1 and "user-tag-access" in doctor.stdout


def test_tags_existing_is_blocked_when_the_token_can_read_the_option(sand, fakepve_factory):
    rig = fakepve_factory()
    rig.set_user_tag_access("existing")
    rig.grant(rig.token_id, "/", "Sys.Audit")
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "user-allow='existing'" in plan.stdout
    assert rig.vms() == []


def test_tags_free_lets_sand_write(sand, fakepve_factory):
    rig = fakepve_factory()
    rig.set_user_tag_access("free")
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert [vm.name for vm in rig.vms()] == ["a"]


# --- P5: pending config -------------------------------------------------------------------------


@BOTH
def test_pending_cpu_change_shows_as_waiting_for_a_reboot_and_apply_restarts(
    sand, fakepve_factory, pve_version
):
    rig = fakepve_factory(pve_version=pve_version)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "cpu": "kvm64"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    assert vm.status == "running" and vm.config["cpu"] == "kvm64"
    # sand's write of cpu=host landed on the running VM; the restart never came.
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "cpu": "host"}]))
    rig.run(vm.pending.__setitem__, "cpu", "host")

    plan = sand.run("plan")
    assert '~ cpu = "kvm64" -> "host" (pending reboot)' in plan.stdout, plan.stdout
    (field,) = {c["vm"]: c for c in sand.plan_json()["changes"]}["a"]["fields"]
    assert field["pending_reboot"] is True

    assert sand.run("apply", "--auto-approve").returncode == 0
    after = rig.vm(vm.vmid)
    assert after.config["cpu"] == "host" and after.pending == {}
    assert after.status == "running"


def test_doctor_json_names_each_backend_and_its_problems(sand, fakepve_factory):
    """``sand doctor --json``: the same findings as the text, per backend, valid against
    the shipped schema, and the exit code the document's ``ok`` says."""
    rig = fakepve_factory(nodes=("pve1", "pve2"))
    sand.write(rig.manifest([{"name": "far", "memory": "1GiB", "node": "pve2"}]))
    text = sand.run("doctor")
    proc = sand.run("doctor", "--json")
    assert proc.returncode == text.returncode == 1, proc.stdout + proc.stderr
    document = json.loads(proc.stdout)
    validate("doctor", document)
    assert document["ok"] is False
    [backend] = document["backends"]
    assert backend["ok"] is False and backend["problems"]
    assert [f"{backend['name']}: {p}" for p in backend["problems"]] == text.stdout.splitlines()
