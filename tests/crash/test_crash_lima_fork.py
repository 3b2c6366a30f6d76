"""Kill `sand apply` with SIGKILL at every step of a fork on Lima (stop the source,
clone it, start it again, mark the copy): the next apply leaves the source running
again, untouched otherwise, and exactly one fork, with its own marker (issue 29)."""

from __future__ import annotations

import pytest

from sand.state.journal import Journal
from tests.backends.lima.test_fork_lima import FORK, SOURCE, made, sidecar, source_files, status
from tests.crash.killer import intent, step
from tests.crash.test_crash_lima import Rig

# The crash point, and whether the source is left stopped (once the limactl children
# the killed run left have ended): then recovery itself starts it again. None: a race
# (the source's start follows the clone's step at once; killed before or after it).
POINTS = {
    "after the fork's intent": (intent("create"), 0.0, False),
    "as the stop begins": (intent("fork-stop"), 0.0, None),
    "mid stop of the source": (intent("fork-stop"), 0.3, True),
    "after the stop": (step("stopped"), 0.0, True),
    "mid clone": (step("stopped"), 0.3, True),
    "after the clone": (step("created"), 0.0, None),
    "mid start of the source": (step("created"), 1.3, False),
    "after the source started": (step("started"), 0.0, False),
    "after the fork's marker": (step("marked"), 0.0, False),
}
RECOVERY = "start agent-1 again, stopped by the interrupted fork try-1"


@pytest.mark.parametrize("point", list(POINTS))
def test_a_fork_killed_anywhere_leaves_the_source_running_and_one_fork(point, tmp_path):
    rig = made(Rig(tmp_path))
    before = source_files(rig)
    rig.write(SOURCE + FORK)
    rig.standin.configure(stop_delay=1.0, clone_delay=1.0, start_delay=1.0)
    condition, delay, stopped = POINTS[point]
    rig.kill_at(condition, delay)  # and waits for the limactl children it left
    rig.standin.configure(stop_delay=0.0, clone_delay=0.0, start_delay=0.0)
    if stopped is None:
        stopped = status(rig, "agent-1") == "Stopped"
    assert (status(rig, "agent-1") == "Stopped") is stopped
    plan = rig.sand("plan")
    assert "will recover" in plan.stdout, plan.stdout
    assert (RECOVERY in plan.stdout) is stopped, plan.stdout
    # Recovery starts the source; the plan then has nothing to do to it.
    proc = rig.sand("apply", "--auto-approve", "--target", "try-1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("started agent-1 again" in proc.stdout + proc.stderr) is stopped, proc.stdout
    assert status(rig, "agent-1") == "Running"  # not by the plan: agent-1 was not targeted
    rig.assert_converged(["agent-1", "try-1"])
    assert status(rig, "agent-1") == "Running"
    assert source_files(rig) == before
    assert sidecar(rig, "try-1")["identity"] == "try-1"
    assert Journal(rig.journal).pending() == []
