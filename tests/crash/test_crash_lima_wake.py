"""Kill `sand wake` and `sand sleep` with SIGKILL midway on the limactl stand-in: a VM
reads as asleep only if it really went to sleep.

`limactl` runs in a session of its own and outlives the killed sand: a wake killed
during its `limactl start` leaves the instance starting, then running. Whatever the
kill left on the instance (its sleep sidecar) or on this host (``asleep.json``) must not
make a later stop, by a person or by anything else, read as a sleep: that VM is stopped,
and the next plan starts it again."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.helpers import run_sand
from tests.crash.killer import intent, kill_when, sand_argv
from tests.crash.test_crash_lima import Rig


def _plan_for_a(rig: Rig) -> dict[str, Any]:
    proc = rig.sand("plan", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(c for c in json.loads(proc.stdout)["changes"] if c["vm"] == "a")


def _asleep_rig(tmp_path) -> Rig:
    rig = Rig(tmp_path)
    rig.write("  - name: a\n")
    assert rig.sand("apply", "--auto-approve").returncode == 0
    proc = run_sand(["sleep", "a", "-f", str(rig.manifest)], cwd=rig.root, env=rig.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _plan_for_a(rig).get("asleep", {}).get("how") == "stopped"
    return rig


def test_a_wake_killed_during_its_start_leaves_no_sleep_behind(tmp_path) -> None:
    rig = _asleep_rig(tmp_path)
    rig.standin.configure(start_delay=1.0)
    rig.standin.clear_log()
    killed = kill_when(
        sand_argv("wake", "a", "-f", str(rig.manifest)),
        rig.env(),
        rig.root,
        rig.journal,
        rig.running("start", intent("power")),
    )
    assert killed, "the wake finished before its limactl start began"
    rig.settle()  # the orphaned limactl start has ended: the instance is up
    rig.standin.configure(start_delay=0.0)
    assert rig.standin.list_json("a")[0]["status"] == "Running"

    rig.standin.run("stop", "a")  # a person's stop, later
    change = _plan_for_a(rig)
    assert "asleep" not in change, change
    assert change["action"] == "update", change  # drift: the plan starts it again
    row = json.loads(rig.sand("status", "--json").stdout)["vms"][0]
    assert "asleep" not in row and row["conditions"]["Synced"] is False, row


def test_a_sleep_whose_stop_never_happened_leaves_no_sleep_behind(tmp_path) -> None:
    """The other order: a sleep cut short before its instance stopped (here its
    `limactl stop` fails; a kill there is the same) leaves it running and unclaimed,
    so a later stop by a person is a stop, not a sleep."""
    rig = Rig(tmp_path)
    rig.write("  - name: a\n")
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.standin.fail("stop", "simulated: the stop never happened")
    proc = run_sand(["sleep", "a", "-f", str(rig.manifest)], cwd=rig.root, env=rig.env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rig.standin.clear_faults()
    assert rig.standin.list_json("a")[0]["status"] == "Running"

    rig.standin.run("stop", "a")  # a person's stop, later
    change = _plan_for_a(rig)
    assert "asleep" not in change and change["action"] == "update", change


def test_an_apply_killed_while_it_wakes_leaves_no_sleep_behind(tmp_path) -> None:
    """An apply that must change an asleep VM wakes it first: killed during that start,
    neither the instance's mark nor this host's record may outlive the wake."""
    rig = _asleep_rig(tmp_path)
    rig.write("  - name: a\n    cpus: 4\n")
    rig.standin.configure(start_delay=1.0)
    rig.standin.clear_log()
    rig.kill_at(rig.running("start", intent("power")))
    rig.standin.configure(start_delay=0.0)
    assert rig.standin.list_json("a")[0]["status"] == "Running"

    rig.standin.run("stop", "a")  # a person's stop, later
    assert "asleep" not in _plan_for_a(rig)
    rig.assert_converged(["a"])
    listed = rig.standin.list_json("a")[0]
    assert listed["cpus"] == 4 and listed["status"] == "Running"
