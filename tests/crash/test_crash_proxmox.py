"""Kill `sand apply` with SIGKILL at every mutating step on fakepve; the next
apply must converge with zero duplicate and zero orphaned VMs, and no lock
needs a manual unlock.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import (
    env_for,
    intent,
    kill_when,
    only_the_killed_runs_tasks_take_time,
    sand_argv,
    step,
    task_started,
)

VMS = [{"name": "web-1"}, {"name": "web-2"}]

CREATE_POINTS = {
    # crash point: (journal condition, extra delay after it holds)
    "after id allocation": (intent("create"), 0.0),
    "mid clone task": (task_started("qmclone"), 0.0),
    "after the clone": (step("cloned"), 0.0),
    "after config": (step("configured"), 0.0),
    "before start": (step("resized"), 0.0),
    "mid start task": (task_started("qmstart"), 0.0),
}


def journal_path(sand: Sand):
    return sand.state_dir / "projects" / "demo" / "journal.jsonl"


def assert_interrupted(sand: Sand) -> None:
    """The kill really left an operation half-done for the next apply to settle."""
    from sand.state.journal import Journal

    assert Journal(journal_path(sand)).pending(), "the kill left no unfinished operation"


def assert_converged(sand: Sand, rig, expected: list[str], *args: str) -> None:
    proc = sand.run("apply", "--auto-approve", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(vm.name for vm in rig.vms())
    assert names == sorted(expected), f"duplicates or orphans: {names}"
    assert all(vm.lock in (None, "") for vm in rig.vms() if hasattr(vm, "lock"))
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout


@pytest.mark.fakepve_rig(time_scale=1.0)
@pytest.mark.parametrize("point", list(CREATE_POINTS))
def test_crash_during_create_converges(point, tmp_path, fakepve_server):
    rig = fakepve_server
    for task in ("qmclone", "qmstart"):
        rig.set_task_secs(task, 1.0)
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS))
    condition, delay = CREATE_POINTS[point]
    killed = kill_when(
        sand_argv("apply", "--auto-approve", "--parallelism", "1"),
        env_for(sand.state_dir),
        tmp_path,
        journal_path(sand),
        condition,
        delay=delay,
    )
    assert killed, f"apply finished before reaching {point!r}"
    assert_interrupted(sand)
    only_the_killed_runs_tasks_take_time(rig, "qmclone", "qmstart")
    assert_converged(sand, rig, ["web-1", "web-2"])


@pytest.mark.fakepve_rig(time_scale=1.0)
@pytest.mark.parametrize("point", ["at the intent", "mid stop task"])
def test_crash_mid_delete_converges(point, tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest([*VMS, {"name": "web-3"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    rig.set_task_secs("qmdestroy", 1.0)
    rig.set_task_secs("qmstop", 1.0)
    sand.write(rig.manifest(VMS))
    killed = kill_when(
        # fakepve's VMs have no guest to sweep for unpushed work.
        sand_argv("apply", "--auto-approve", "--allow-data-loss"),
        env_for(sand.state_dir),
        tmp_path,
        journal_path(sand),
        intent("delete") if point == "at the intent" else task_started("qmstop"),
    )
    assert killed
    assert_interrupted(sand)
    only_the_killed_runs_tasks_take_time(rig, "qmdestroy", "qmstop")
    # A delete killed before it began is planned again, and swept again: same flag.
    assert_converged(sand, rig, ["web-1", "web-2"], "--allow-data-loss")


UPDATE_POINTS = {
    "mid shutdown task": task_started("qmshutdown"),
    # The one config write carried the converged marker; the start had not come.
    "after the config write": step("configured"),
    "mid start task": task_started("qmstart"),
}


@pytest.mark.fakepve_rig(time_scale=1.0)
@pytest.mark.parametrize("point", list(UPDATE_POINTS))
def test_crash_mid_update_converges(point, tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS))
    assert sand.run("apply", "--auto-approve").returncode == 0
    for task in ("qmshutdown", "qmstop", "qmstart"):
        rig.set_task_secs(task, 1.0)
    sand.write(rig.manifest([{"name": "web-1", "memory": "4GiB"}, {"name": "web-2"}]))
    killed = kill_when(
        sand_argv("apply", "--auto-approve"),
        env_for(sand.state_dir),
        tmp_path,
        journal_path(sand),
        UPDATE_POINTS[point],
    )
    assert killed
    assert_interrupted(sand)
    only_the_killed_runs_tasks_take_time(rig, "qmshutdown", "qmstop", "qmstart")
    assert_converged(sand, rig, ["web-1", "web-2"])
    (vm,) = rig.vms_named("web-1")
    assert int(vm.config["memory"]) == 4096 and vm.status == "running" and vm.pending == {}


def test_lock_is_free_after_a_kill(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS))
    proc = subprocess.Popen(
        sand_argv("apply", "--auto-approve", "--watch", "--interval", "60"),
        env=env_for(sand.state_dir),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import time

        deadline = time.monotonic() + 60
        while len(rig.vms()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    proc2 = sand.run("apply", "--auto-approve")
    assert proc2.returncode == 0, proc2.stderr
    assert "lock" not in proc2.stderr


def task_started(task_type: str):
    def condition(records) -> bool:
        return any(
            r.get("phase") == "step" and f":{task_type}:" in str(r.get("upid") or "")
            for r in records
        )

    return condition


@pytest.mark.real_clock  # the next apply waits out the task
@pytest.mark.fakepve_rig(time_scale=1.0)
@pytest.mark.parametrize("task_type", ["qmshutdown", "qmstart"])
def test_crash_mid_power_task_is_awaited_before_convergence(task_type, tmp_path, fakepve_server):
    """The killed run's shutdown or start goes on in PVE; the next apply waits for it
    (its UPID is in the journal) before it reads the VM, so the VM ends running with
    the new memory and is recorded converged only then."""
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS))
    assert sand.run("apply", "--auto-approve").returncode == 0
    rig.set_task_secs("qmshutdown", 4.0)  # long enough to outlast the plan below
    rig.set_task_secs("qmstart", 4.0)
    sand.write(rig.manifest([{"name": "web-1", "memory": "4GiB"}, {"name": "web-2"}]))
    killed = kill_when(
        sand_argv("apply", "--auto-approve"),
        env_for(sand.state_dir),
        tmp_path,
        journal_path(sand),
        task_started(task_type),
    )
    assert killed
    only_the_killed_runs_tasks_take_time(rig, "qmshutdown", "qmstart")
    from tests.crash.killer import journal_records

    (upid,) = [
        str(r["upid"])
        for r in journal_records(journal_path(sand))
        if f":{task_type}:" in str(r.get("upid") or "")
    ]
    rig.clear_log()
    proc = sand.run("plan")
    assert "will recover: wait for the task still running on VM" in proc.stdout, proc.stdout
    assert_converged(sand, rig, ["web-1", "web-2"])
    (web1,) = rig.vms_named("web-1")
    assert web1.status == "running" and int(web1.config["memory"]) == 4096
    # The next run polled the killed run's task before it changed any VM (taking the
    # project's lease, first, changes none).
    polls = rig.requests("GET", f"/nodes/pve1/tasks/{upid}/status")
    lease = {f"/nodes/pve1/qemu/{vm.vmid}/config" for vm in rig.lease_vms()}
    writes = [r for r in rig.log if r.method in ("PUT", "POST") and r.path not in lease]
    assert polls and all(polls[0].at < w.at for w in writes)
    if task_type == "qmstart":
        # The write before the start carried the memory and the converged marker: once
        # the killed run's start ended, nothing was left to change.
        assert writes == []
    else:
        assert writes
