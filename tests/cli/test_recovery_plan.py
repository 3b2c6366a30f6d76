"""`sand plan` shows what apply will recover first, and plans accordingly; a Lima
listing that forgets an instance is not believed. The real CLI, killed with SIGKILL
from outside; assertions read fakepve's VMs and the stand-in's instances.

The plan after a run cut before or after the marker, with no process to kill, is
checked on the in-memory backend
(``tests/apply/test_recovery_engine.py``); each backend's own decision for such a cut
is a contract test (``test_recovery_of_an_interrupted_create_removes_or_adopts_it``)."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv, task_started
from tests.crash.test_crash_lima import TWO, Rig

VMS = [{"name": "web-1"}, {"name": "web-2"}]


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_plan_after_a_kill_mid_clone_says_recover_then_create(tmp_path, fakepve_server):
    rig = fakepve_server
    rig.set_task_secs("qmclone", 1.0)
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS))
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    killed = kill_when(
        sand_argv("apply", "--auto-approve", "--parallelism", "1"),
        env_for(sand.state_dir),
        tmp_path,
        journal,
        task_started("qmclone"),
    )
    assert killed
    deadline = time.monotonic() + 20
    while any(vm.lock for vm in rig.vms()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the clone goes on in PVE; let it end
    (half,) = rig.vms()
    rig.clear_log()

    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = (
        f"# {half.name} (pve, {half.vmid}) will recover: delete half-made clone {half.vmid} "
        f"of {half.name} (its create was interrupted before configuration), then create"
    )
    assert line in proc.stdout, proc.stdout
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in proc.stdout
    assert rig.count("DELETE") == 0 and rig.count("POST") == 0 and rig.count("PUT") == 0
    assert rig.vm(half.vmid) is not None  # plan touched nothing
    plan = sand.plan_json()
    (recovery,) = plan["recovery"]
    assert (recovery["action"], recovery["identity"], recovery["absent"]) == (
        "delete",
        str(half.vmid),
        True,
    )
    assert recovery["line"].endswith(", then create")
    assert [c["action"] for c in plan["changes"]] == ["create", "create"]

    # Apply does what the plan said: recover, then create both. Even a saved plan made
    # before the recovery still applies: it was planned as if recovery had run.
    saved = tmp_path / "recover.plan"
    assert sand.run("plan", "--out", str(saved)).returncode == 0
    proc = sand.run("apply", str(saved))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in proc.stdout
    assert f"Recovered: create of {half.name} (pve): deleted half-made clone" in proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2"]
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_plan_while_the_killed_runs_clone_still_runs_says_apply_waits(tmp_path, fakepve_server):
    rig = fakepve_server
    rig.set_task_secs("qmclone", 6.0)
    sand = Sand(tmp_path)
    sand.write(rig.manifest(VMS[:1]))
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    assert kill_when(
        sand_argv("apply", "--auto-approve"),
        env_for(sand.state_dir),
        tmp_path,
        journal,
        task_started("qmclone"),
    )
    (cloning,) = rig.vms()  # the clone the killed run started goes on in PVE
    proc = sand.run("plan")
    assert f"web-1 (pve, {cloning.vmid}) will recover: wait for " in proc.stdout, proc.stdout
    assert rig.vm(cloning.vmid) is not None and rig.vm(cloning.vmid).lock == "clone"
    rig.set_task_secs("qmclone", 0.0)
    rig.fast_forward()  # the killed run's clone is done
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [vm.name for vm in rig.vms()] == ["web-1"]


def test_lima_instance_missing_from_the_listing_is_checked_before_it_is_made_again(tmp_path):
    rig = Rig(tmp_path)
    rig.write(TWO)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.standin.configure(hide_from_list=["a"])
    rig.standin.clear_log()

    proc = rig.sand("plan", "--json")
    assert proc.returncode == 1
    reason = json.loads(proc.stdout)["unknown_backends"]["laptop"]
    assert "instance a, which sand made, is missing from the listing" in reason
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 1
    assert not {"create", "clone", "delete"} & set(rig.standin.commands())
    assert rig.vms() == ["a", "b"]

    # Gone for real (its directory too): forgotten, and made again.
    shutil.rmtree(rig.standin.instance_dir("a"))
    rig.standin.configure(hide_from_list=None)
    rig.assert_converged(["a", "b"])
