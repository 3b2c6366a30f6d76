"""On fakepve, a sleep by stop and its wake cut short: a VM reads as asleep only if it
really went to sleep (the Lima side: test_crash_lima_wake.py).

A wake killed while PVE's start task runs leaves the VM starting, then running: no
sleep tag may outlive it, or a later stop in the PVE UI reads as a sleep. A sleep
whose shutdown never happened leaves the VM running and unmarked likewise."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv, task_started
from tests.crash.test_crash_proxmox import journal_path


def _asleep_tags(rig, vmid: int) -> list[str]:
    tags = str(rig.vm(vmid).config.get("tags") or "")
    return [t for t in tags.split(";") if t.startswith("sand-asleep-")]


def _persons_stop_reads_as_drift(sand: Sand, rig, vmid: int) -> None:
    rig.call(rig.pve._do_stop(rig.pve.vm(vmid), "root@pam", {}))  # in the PVE UI
    (change,) = json.loads(sand.run("plan", "--json").stdout)["changes"]
    assert "asleep" not in change and change["action"] == "update", change


@pytest.fixture
def awake(tmp_path, fakepve_server) -> tuple[Sand, int]:
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "a"}]))
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sand, fakepve_server.vms_named("a")[0].vmid


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_a_wake_killed_during_its_start_task_leaves_no_sleep_behind(awake, fakepve_server):
    sand, vmid = awake
    rig = fakepve_server
    proc = sand.run("sleep", "--stop", "a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _asleep_tags(rig, vmid) and rig.vm(vmid).status == "stopped"

    rig.set_task_secs("qmstart", 600.0)  # ends when fast-forwarded, after the kill
    killed = kill_when(
        sand_argv("wake", "a"),
        env_for(sand.state_dir),
        sand.workdir,
        journal_path(sand),
        task_started("qmstart"),
    )
    assert killed, "the wake finished before its start task began"
    rig.set_task_secs("qmstart", 0.0)
    rig.fast_forward()  # the killed wake's start goes on in PVE, and ends
    assert rig.vm(vmid).status == "running" and _asleep_tags(rig, vmid) == []
    _persons_stop_reads_as_drift(sand, rig, vmid)


def test_a_sleep_whose_shutdown_never_happened_leaves_no_sleep_behind(awake, fakepve_server):
    sand, vmid = awake
    rig = fakepve_server
    rig.fail("POST", f"/qemu/{vmid}/status/shutdown", 500, "simulated: the shutdown never ran")
    proc = sand.run("sleep", "--stop", "a")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rig.vm(vmid).status == "running" and _asleep_tags(rig, vmid) == []
    _persons_stop_reads_as_drift(sand, rig, vmid)
