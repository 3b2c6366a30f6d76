"""Warm pools on fakepve (issue 29, item 4): spares are kept, a new VM naming the pool
claims one (renamed in one config write: no clone, no start), the slot is refilled in
the same apply, an image change replaces the spares and never the VM that claimed one,
and a claim cut short leaves the spare or the claimed VM, never both or neither."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, intent, kill_when, sand_argv
from tests.machine_schemas import validate
from tests.rig.clones import sand_block

AGENT = {"name": "agent-4", "pool": "agents"}


def _manifest(rig, vms, **pool):
    data = rig.manifest(vms)
    data["pools"] = {"agents": {"warm": 2, **pool}}
    return data


def _spares(rig) -> dict[str, int]:
    return {vm.name: vm.vmid for vm in rig.vms() if "sand-spare-agents" in vm.config["tags"]}


def _incarnations(rig) -> dict[str, str]:
    """Each VM's incarnation (a vmid may be given again after a delete)."""
    return {vm.name: sand_block(vm.config["description"])["op"] for vm in rig.vms()}


def _settled(sand: Sand) -> None:
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _warm(tmp_path, rig) -> tuple[Sand, dict[str, int]]:
    sand = Sand(tmp_path)
    sand.write(_manifest(rig, []))
    plan = sand.run("plan")
    assert '+ spare "agents-spare-1" of pool agents {' in plan.stdout, plan.stdout
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spares = _spares(rig)
    assert sorted(spares) == ["agents-spare-1", "agents-spare-2"]
    for vmid in spares.values():
        vm = rig.vm(vmid)
        assert vm is not None and sand_block(vm.config["description"])["pool"] == "agents"
    _settled(sand)
    return sand, spares


def test_a_new_vm_claims_a_spare_without_a_clone_and_the_pool_refills(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    plan = sand.run("plan")
    assert '+ vm "agent-4" (claims spare agents-spare-1 of pool agents) {' in plan.stdout
    assert '+ spare "agents-spare-1" of pool agents (refill 1/2) {' in plan.stdout
    data = json.loads(sand.run("plan", "--json").stdout)
    validate("plan", data)
    by_vm = {c["vm"]: c for c in data["changes"]}
    assert by_vm["agent-4"]["claims"] == {
        "pool": "agents",
        "spare": "agents-spare-1",
        "identity": str(spares["agents-spare-1"]),
    }
    assert by_vm["agents-spare-1"]["refill"] == {"slot": 1, "warm": 2}
    assert by_vm["agents-spare-1"]["spare_of"] == "agents"
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (agent,) = rig.vms_named("agent-4")
    claimed = spares["agents-spare-1"]
    assert agent.vmid == claimed  # the spare itself, renamed
    path = f"/nodes/{agent.node}/qemu/{claimed}"
    # No clone of it, no start: one config write renamed it and took its pool role away.
    assert not rig.requests("POST", contains=f"{path}/status/")
    # Per claim: re-read, write, read back (five); marked converged after (two).
    assert len(rig.requests(contains=path)) == 7
    assert rig.count("POST", contains="/clone") == 1  # the refill's
    assert "sand-spare" not in agent.config["tags"]
    block = sand_block(agent.config["description"])
    assert block["name"] == "agent-4" and "pool" not in block
    # The slot is filled again by a new VM; the other spare is untouched.
    now = _spares(rig)
    assert sorted(now) == ["agents-spare-1", "agents-spare-2"]
    assert now["agents-spare-1"] not in spares.values()
    assert now["agents-spare-2"] == spares["agents-spare-2"]
    _settled(sand)


def test_with_no_spare_ready_the_vm_is_made_as_any_vm(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(_manifest(rig, [AGENT], warm=0))
    plan = sand.run("plan")
    assert '+ vm "agent-4" {' in plan.stdout
    assert "no spare of pool agents is ready: made as any VM" in plan.stdout
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert [vm.name for vm in rig.vms()] == ["agent-4"]
    _settled(sand)


def test_an_image_change_replaces_the_spares_and_never_a_claimed_vm(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, _ = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (agent,) = rig.vms_named("agent-4")
    before = _incarnations(rig)
    rig.seed_vm(9001, "debian-13-b", template=True, status="stopped", disk=4 << 30, cores=1)
    sand.write(_manifest(rig, [AGENT], image="9001"))
    data = json.loads(sand.run("plan", "--json").stdout)
    acting = {c["vm"]: c["action"] for c in data["changes"] if c["action"] != "no-op"}
    assert acting == {"agents-spare-1": "replace", "agents-spare-2": "replace"}
    # Spares are this project's VMs to the mass-delete guard: 2 of 3 is too many.
    refused = sand.run("apply", "--auto-approve")
    assert refused.returncode != 0 and "--allow-mass-delete" in refused.stdout + refused.stderr
    proc = sand.run("apply", "--auto-approve", "--allow-mass-delete")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = _incarnations(rig)
    assert sorted(after) == sorted(before)
    assert after["agent-4"] == before["agent-4"]  # the VM that claimed a spare: kept
    assert all(after[n] != before[n] for n in ("agents-spare-1", "agents-spare-2"))
    for vmid in _spares(rig).values():
        vm = rig.vm(vmid)
        assert vm is not None
        assert sand_block(vm.config["description"])["image"] == "template:9001@local-lvm"
    (still,) = rig.vms_named("agent-4")
    assert still.vmid == agent.vmid
    _settled(sand)


@pytest.mark.sand_time_scale(0.01)  # the failing write's retries, not their backoff
def test_a_claim_whose_write_failed_leaves_the_spare_and_is_settled(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    claimed = spares["agents-spare-1"]
    vm = rig.vm(claimed)
    assert vm is not None
    rig.fail("PUT", f"/qemu/{claimed}/config", 500, "got timeout", times=20)
    failed = sand.run("apply", "--auto-approve")
    assert failed.returncode != 0
    # Not claimed, not refilled over it: the spare is still there, once.
    assert _spares(rig) == spares and not rig.vms_named("agent-4")
    rig.clear_faults()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the claim of spare agents-spare-1 by agent-4 did not land" in proc.stderr
    (agent,) = rig.vms_named("agent-4")
    assert agent.vmid == claimed
    assert sorted(_spares(rig)) == ["agents-spare-1", "agents-spare-2"]
    _settled(sand)


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_a_kill_mid_claim_leaves_the_spare_or_the_claimed_vm(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    # Every answer comes late: the claim's write lands, and sand is killed waiting for
    # its answer (the journal's entry left open).
    rig.run(rig.pve.slow_network, 0.5)
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    killed = kill_when(
        sand_argv("apply", "--auto-approve"),
        env_for(sand.state_dir),
        tmp_path,
        journal,
        intent("claim"),
        delay=0.2,
    )
    assert killed, "apply finished before the claim"
    claimed = rig.vm(spares["agents-spare-1"])
    assert claimed is not None  # never neither
    assert claimed.name in ("agent-4", "agents-spare-1")
    holders = [vm for vm in rig.vms() if vm.name in ("agent-4",)]
    assert len(holders) <= 1  # never both
    rig.clear_faults()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Recovered: claim of agent-4 (pve): the claim of spare agents-spare-1" in proc.stderr
    (agent,) = rig.vms_named("agent-4")
    assert agent.vmid == spares["agents-spare-1"]
    assert sorted(_spares(rig)) == ["agents-spare-1", "agents-spare-2"]
    assert len(rig.vms()) == 3
    _settled(sand)


def test_a_pool_whose_image_the_backend_lacks_is_blocked_at_the_pools_image(
    tmp_path, fakepve_server
):
    rig = fakepve_server
    sand = Sand(tmp_path)
    path = sand.write(_manifest(rig, [AGENT], image="9002"))
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "9002" in text)
    column = lines[line - 1].index("image: ") + len("image: ") + 1
    plan = sand.run("plan")
    assert plan.returncode == 1
    where = f"sand.yaml:{line}:{column}: template '9002' not found"
    # The spares and the VM that would claim one are sent to the pool's image line.
    assert plan.stdout.count(where) == 3, plan.stdout
    assert not rig.vms()


def test_a_smaller_pool_deletes_its_last_spare_without_a_sweep(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(_manifest(rig, [AGENT], warm=1))
    plan = sand.run("plan")
    # A spare never held work: no guest is swept (these fake VMs have none to reach, so
    # a sweep would block the delete as "could not be swept").
    assert '- spare "agents-spare-2" of pool agents {' in plan.stdout, plan.stdout
    assert "unpushed work" not in plan.stdout
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vm(spares["agents-spare-2"]) is None
    assert sorted(vm.name for vm in rig.vms()) == ["agent-4", "agents-spare-1"]
    _settled(sand)


def test_a_claim_needs_no_template_only_its_refill_does(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    rig.destroy_by_hand(rig.template_vmid)  # the spares' template is gone
    sand.write(_manifest(rig, [AGENT]))
    plan = sand.run("plan")
    assert '+ vm "agent-4" (claims spare agents-spare-1 of pool agents) {' in plan.stdout
    # Only the refill, which clones, is blocked.
    assert plan.stdout.count("not found on the cluster") == 1, plan.stdout
    assert '! spare "agents-spare-1" of pool agents (refill 1/2) {' in plan.stdout
    proc = sand.run("apply", "--auto-approve")
    (agent,) = rig.vms_named("agent-4")
    assert agent.vmid == spares["agents-spare-1"]
    assert proc.returncode != 0  # the refill is blocked: not converged, and said so
    assert "agents-spare-1 blocked" in proc.stdout + proc.stderr


def test_a_targeted_claim_leaves_the_refill_to_the_next_apply(tmp_path, fakepve_server):
    rig = fakepve_server
    sand, spares = _warm(tmp_path, rig)
    sand.write(_manifest(rig, [AGENT]))
    plan = sand.run("plan", "--target", "agent-4")
    assert '+ vm "agent-4" (claims spare agents-spare-1 of pool agents) {' in plan.stdout
    data = json.loads(sand.run("plan", "--json", "--target", "agent-4").stdout)
    (slot,) = [c for c in data["changes"] if c["vm"] == "agents-spare-1"]
    assert slot["action"] == "no-op"
    assert slot["reasons"] == ["claimed by agent-4: refilled by the next apply"]
    proc = sand.run("apply", "--auto-approve", "--target", "agent-4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["agent-4", "agents-spare-2"]
    assert rig.vms_named("agent-4")[0].vmid == spares["agents-spare-1"]
    # The next apply fills the slot.
    plan = sand.run("plan")
    assert '+ spare "agents-spare-1" of pool agents {' in plan.stdout, plan.stdout
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert sorted(_spares(rig)) == ["agents-spare-1", "agents-spare-2"]
    _settled(sand)
