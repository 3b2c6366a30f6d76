"""Replacement on fakepve: the new VM is made before the old one is destroyed, and a
failure anywhere before that leaves the old VM exactly as it was.

The engine's side of these (a failure at each step, a kill at each step) is checked on
the in-memory backend (``tests/apply/test_replace_engine.py``); here, once each, what a
real far side receives and keeps.

These VMs have no guest behind them, so the unpushed-work guard cannot sweep them;
``--allow-data-loss`` keeps it out of the way here (it has tests of its own) while
the order of the calls PVE receives is what is checked.
"""

from __future__ import annotations

import json

import pytest

from sand.state.journal import Journal
from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv, step

GO = ("apply", "--auto-approve", "--allow-data-loss")
OTHER_TEMPLATE = 9001


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def seed_second_template(rig) -> None:
    rig.seed_vm(
        OTHER_TEMPLATE, "debian-13-next", template=True, status="stopped", disk=4 << 30,
        memory_mib=1024, cores=1, tags="golden",
    )  # fmt: skip


def first_call(rig, method: str, contains: str) -> int:
    return next(i for i, r in enumerate(rig.log) if r.method == method and contains in r.path)


def test_create_before_destroy_order_and_result(sand, fakepve_server):
    rig = fakepve_server
    seed_second_template(rig)
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB"}]))
    assert sand.run(*GO).returncode == 0
    (old,) = rig.vms_named("agent-1")
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB", "image": "debian-13-next"}]))
    plan = sand.run("plan", "--json", "--allow-data-loss")
    (change,) = json.loads(plan.stdout)["changes"]
    assert change["action"] == "replace" and change["strategy"] == "create-before-destroy"

    rig.clear_log()
    done = sand.run(*GO)
    assert done.returncode == 0, done.stdout + done.stderr
    clone = first_call(rig, "POST", f"/qemu/{OTHER_TEMPLATE}/clone")
    delete = next(
        i for i, r in enumerate(rig.log) if r.method == "DELETE" and r.path.endswith(f"/{old.vmid}")
    )
    assert clone < delete  # the new VM exists before the old one is asked to go
    (new,) = rig.vms_named("agent-1")
    assert new.vmid != old.vmid and rig.vm(old.vmid) is None
    assert not [v for v in rig.vms() if "sandnew" in (v.name or "")]
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


def test_a_replacement_that_fails_to_start_leaves_the_old_vm(sand, fakepve_server):
    rig = fakepve_server
    seed_second_template(rig)
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB"}]))
    assert sand.run(*GO).returncode == 0
    (old,) = rig.vms_named("agent-1")
    config = dict(old.config)
    rig.task_failures("qmstart", "*", "start failed: kvm: cannot allocate memory")
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB", "image": "debian-13-next"}]))
    failed = sand.run(*GO)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "cannot allocate memory" in failed.stdout + failed.stderr
    (still,) = rig.vms()
    assert still.vmid == old.vmid and still.config == config and still.status == "running"
    # What is left open in the journal is about the discarded replacement only.
    pending = Journal(sand.state_dir / "projects" / "demo" / "journal.jsonl").pending()
    assert all(e.identity != str(old.vmid) for e in pending), pending
    rig.clear_faults()
    again = sand.run(*GO)
    assert again.returncode == 0, again.stdout + again.stderr
    (new,) = rig.vms()
    assert new.name == "agent-1" and new.vmid != old.vmid


def test_destroy_before_create_only_when_the_node_cannot_hold_both(sand, fakepve_server):
    rig = fakepve_server  # one node: 8 GiB, 2 GiB in use
    # PVE shows a node's memory only with Sys.Audit on it (pve-manager Nodes.pm index).
    rig.grant(rig.token_id, f"/nodes/{rig.nodes[0]}", "Sys.Audit")
    seed_second_template(rig)
    sand.write(
        rig.manifest([{"name": "big", "memory": "7GiB"}, {"name": "small", "memory": "1GiB"}])
    )
    assert sand.run(*GO).returncode == 0
    sand.write(
        rig.manifest(
            [
                {"name": "big", "memory": "7GiB", "image": "debian-13-next"},
                {"name": "small", "memory": "1GiB", "image": "debian-13-next"},
            ]
        )
    )
    plan = sand.run("plan", "--allow-data-loss")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "--allow-mass-delete" not in plan.stdout  # the plan shows; apply's guard refuses
    big = plan.stdout.split("# big")[1].split("# small")[0]
    small = plan.stdout.split("# small")[1]
    assert "strategy: destroy-before-create" in big and "7GiB" in big
    assert "strategy: create-before-destroy" in small
    # Replacing all of a backend's VMs counts as a mass delete.
    assert sand.run(*GO).returncode == 1
    assert sand.run(*GO, "--allow-mass-delete").returncode == 0
    assert sorted(v.name for v in rig.vms()) == ["big", "small"]


# A process killed mid-replace and the runs around it, each a process of its own: with the
# runs before and after it in the test's process it failed 2 runs in 3 (cause not found).
@pytest.mark.sand_process
def test_a_kill_after_the_old_vm_went_converges_to_the_replacement(sand, fakepve_server, tmp_path):
    """One crash point here; the plan's words after the others, and every step's outcome,
    in tests/apply/test_replace_engine.py (and tests/crash/test_crash_replace.py)."""
    rig = fakepve_server
    seed_second_template(rig)
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB"}]))
    assert sand.run(*GO).returncode == 0
    (old,) = rig.vms_named("agent-1")
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB", "image": "debian-13-next"}]))
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    # The rename follows "old-deleted" by milliseconds: held, it cannot land before the
    # kill however late the kill comes on a loaded machine.
    rig.hold_writes("PUT", "/config", "name", "agent-1")
    killed = kill_when(
        sand_argv(*GO), env_for(sand.state_dir), tmp_path, journal, step("old-deleted")
    )
    rig.drop_held()
    assert killed, "apply finished before the crash point"
    plan = sand.run("plan", "--allow-data-loss")
    # The plan says first what apply will settle, and plans as if it were done.
    assert "will recover: name the replacement agent-1-sandnew" in plan.stdout, plan.stdout
    assert "agent-1 (pve" in plan.stdout and "will be created" not in plan.stdout
    again = sand.run(*GO)
    assert again.returncode == 0, again.stdout + again.stderr
    (new,) = rig.vms()
    assert new.name == "agent-1" and new.vmid != old.vmid
    assert json.dumps(new.config).count("sandnew") == 0
    assert sand.run("plan", "--detailed-exitcode").returncode == 0
