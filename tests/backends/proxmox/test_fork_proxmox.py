"""A fork on fakepve (issue 29, items 1 and 6): the source is snapshotted, the fork is
a full clone of that snapshot, and the snapshot is removed, also after a kill -9 at
each step; the source is otherwise untouched, the fork has its own MAC and marker."""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import (
    env_for,
    intent,
    kill_when,
    only_the_killed_runs_tasks_take_time,
    sand_argv,
    step,
)

SOURCE = [{"name": "agent-1"}]
FORKED = [*SOURCE, {"name": "try-1", "from": {"vm": "agent-1"}}]


def journal_path(sand: Sand):
    return sand.state_dir / "projects" / "demo" / "journal.jsonl"


def _source(rig):
    (vm,) = rig.vms_named("agent-1")
    return vm


def _settled(sand: Sand, rig) -> None:
    """One source, one fork, no snapshot left, and nothing more to do."""
    assert sorted(vm.name for vm in rig.vms()) == ["agent-1", "try-1"]
    source = _source(rig)
    assert rig.run(lambda: dict(source.snapshots)) == {}
    assert "parent" not in _source(rig).config
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_fork_is_a_full_clone_of_a_snapshot_that_is_removed_after(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(SOURCE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    source = _source(rig)
    before = {k: v for k, v in source.config.items() if k != "digest"}
    sand.write(rig.manifest(FORKED))
    plan = sand.run("plan")
    assert '+ vm "try-1" (fork of agent-1 at apply time) {' in plan.stdout
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = f"/nodes/{source.node}/qemu/{source.vmid}"
    assert rig.count("POST", f"{path}/snapshot") == 1
    assert rig.count("POST", f"{path}/clone") == 1
    (fork,) = rig.vms_named("try-1")
    clones = rig.run(lambda: list(rig.pve.clone_sources))
    ((cloned, newid, snapname),) = [c for c in clones if c[0] == source.vmid]
    assert (cloned, newid) == (source.vmid, fork.vmid)
    assert snapname is not None and snapname.startswith("sand-fork-")
    (removed,) = rig.requests("DELETE", contains="/snapshot/")
    assert removed.path == f"{path}/snapshot/{snapname}"
    # Snapshot, clone from it, removal: in that order.
    order = [r.method for r in rig.log if "/snapshot" in r.path or r.path.endswith("/clone")]
    assert order[:1] == ["POST"] and order[-1] == "DELETE"
    # The source: only snapshotted (and the snapshot gone), never written or restarted.
    assert not rig.requests("PUT", f"{path}/config")
    assert not rig.requests(contains=f"{path}/status/")
    after = {k: v for k, v in _source(rig).config.items() if k != "digest"}
    assert after == before
    mac = lambda vm: vm.config["net0"].split(",")[0]  # noqa: E731
    assert mac(fork) != mac(source)
    assert fork.config["smbios1"] != source.config["smbios1"]
    assert f"sand-id-{fork.vmid}" in fork.config["tags"] or str(fork.vmid) in fork.config["tags"]
    _settled(sand, rig)
    # A later change of what the source is made from never touches the fork (a change
    # of a field the fork inherits, e.g. memory, is the fork's too: in place).
    sand.write(rig.manifest([{"name": "agent-1", "image": "9001"}, FORKED[1]]))
    plan = sand.run("plan")
    assert "agent-1" in plan.stdout and "try-1" not in plan.stdout, plan.stdout


@pytest.mark.sand_time_scale(0.01)  # the 500s' retry backoff is not the subject
def test_a_memory_fork_snapshots_the_ram_and_a_failed_removal_is_finished_later(
    tmp_path, fakepve_server
):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(SOURCE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    memory = {"name": "try-1", "from": {"vm": "agent-1", "snapshot": "memory"}}
    sand.write(rig.manifest([*SOURCE, memory]))
    # The snapshot's removal is refused this time: the snapshot stays, for now.
    rig.fail("DELETE", "", 500, "storage busy", times=20)
    failed = sand.run("apply", "--auto-approve")
    assert failed.returncode != 0
    source = _source(rig)
    (snapshot,) = rig.run(lambda: list(source.snapshots.values()))
    assert snapshot.get("vmstate")  # taken with the RAM of the running source
    rig.clear_faults()
    # The next apply finishes the fork's journal entry: the snapshot goes.
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Recovered: fork-snapshot of try-1 (pve): snapshot sand-fork-" in proc.stderr
    _settled(sand, rig)


FORK_POINTS = {
    "before the snapshot": (intent("fork-snapshot"), 0.0),
    "mid snapshot task": (intent("fork-snapshot"), 0.5),
    "after the snapshot": (step("snapshot-taken"), 0.0),
    "mid clone task": (step("snapshot-taken"), 0.5),
    "after the clone": (step("cloned"), 0.0),
}


@pytest.mark.fakepve_rig(time_scale=1.0)
@pytest.mark.parametrize("point", list(FORK_POINTS))
def test_a_kill_mid_fork_leaves_no_snapshot_and_no_duplicate(point, tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(SOURCE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    before = {k: v for k, v in _source(rig).config.items() if k != "digest"}
    for task in ("qmsnapshot", "qmclone", "qmdelsnapshot"):
        rig.set_task_secs(task, 1.0)
    sand.write(rig.manifest(FORKED))
    condition, delay = FORK_POINTS[point]
    killed = kill_when(
        sand_argv("apply", "--auto-approve"),
        env_for(sand.state_dir),
        tmp_path,
        journal_path(sand),
        condition,
        delay=delay,
    )
    assert killed, f"apply finished before reaching {point!r}"
    only_the_killed_runs_tasks_take_time(rig, "qmsnapshot", "qmclone", "qmdelsnapshot")
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _settled(sand, rig)
    after = {k: v for k, v in _source(rig).config.items() if k != "digest"}
    assert after == before
