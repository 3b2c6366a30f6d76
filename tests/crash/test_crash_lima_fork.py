"""Kill `sand apply` with SIGKILL at every step of a fork on Lima (stop the source,
clone it, start it again, mark the copy), and of two forks of one source copied with one
stop of it: the next apply leaves the source running again, untouched otherwise, and
exactly one VM per fork, with its own marker (issue 29)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sand.state.journal import Journal
from tests.backends.lima.test_fork_lima import (
    FORK,
    SOURCE,
    TWO_FORKS,
    made,
    sidecar,
    source_files,
    status,
)
from tests.crash.killer import Record, intent, step
from tests.crash.test_crash_lima import Rig


def count(phase: str, key: str, value: str, n: int) -> Callable[[list[Record]], bool]:
    """The journal holds at least ``n`` records of ``phase`` with ``key`` = ``value``."""
    return lambda records: (
        sum(1 for r in records if r.get("phase") == phase and r.get(key) == value) >= n
    )


def source_step(name: str) -> Callable[[list[Record]], bool]:
    """The fork-stop entry (the source's stop and start) reached step ``name``."""

    def reached(records: list[Record]) -> bool:
        ids = {r.get("id") for r in records if r.get("op") == "fork-stop"}
        return any(r.get("step") == name and r.get("id") in ids for r in records)

    return reached


# The crash point, and whether the source is left stopped (once the limactl children
# the killed run left have ended): then recovery itself starts it again. None: a race
# (the source's start follows the clone's step at once; killed before or after it).
POINTS = {
    # The fork-stop's intent and the stop follow the fork's intent at once: a race too.
    "after the fork's intent": (intent("create"), 0.0, None),
    "as the stop begins": (intent("fork-stop"), 0.0, None),
    "mid stop of the source": (intent("fork-stop"), 0.3, True),
    "after the stop": (step("stopped"), 0.0, True),
    "mid clone": (step("stopped"), 0.3, True),
    "after the clone": (step("created"), 0.0, None),
    "mid start of the source": (step("created"), 0.5, None),
    "after the source started": (source_step("started"), 0.0, False),
    # The fork goes on (its marker, its start) as the source starts again.
    "after the fork's marker": (step("marked"), 0.0, None),
}
RECOVERY = "start agent-1 again, stopped by the interrupted fork try-1"


# Two forks, one stop: the same, at the steps between the forks' copies.
BATCH_POINTS = {
    "after both forks' intents": (count("intent", "op", "create", 2), 0.0, None),
    "mid stop of the source": (intent("fork-stop"), 0.3, True),
    "after the first copy": (count("step", "step", "created", 1), 0.0, True),
    "mid second copy": (count("step", "step", "created", 1), 0.3, True),
    "after both copies": (count("step", "step", "created", 2), 0.0, None),
    "mid start of the source": (count("step", "step", "created", 2), 0.5, None),
    "after the first fork's marker": (count("step", "step", "marked", 1), 0.0, None),
    "after the source started": (source_step("started"), 0.0, False),
}
BATCH_RECOVERY = "start agent-1 again, stopped by the interrupted forks try-1, try-2"


@pytest.mark.parametrize("point", list(POINTS))
def test_a_fork_killed_anywhere_leaves_the_source_running_and_one_fork(point, tmp_path):
    killed_and_recovered(tmp_path, FORK, ["try-1"], POINTS[point], RECOVERY)


@pytest.mark.parametrize("point", list(BATCH_POINTS))
def test_two_forks_killed_anywhere_leave_the_source_running_and_one_of_each(point, tmp_path):
    recovery = BATCH_RECOVERY
    killed_and_recovered(tmp_path, TWO_FORKS, ["try-1", "try-2"], BATCH_POINTS[point], recovery)


def killed_and_recovered(
    tmp_path: Path,
    forks: str,
    names: list[str],
    point: tuple[Callable[[list[Record]], bool], float, bool | None],
    recovery: str,
) -> None:
    rig = made(Rig(tmp_path))
    before = source_files(rig)
    rig.write(SOURCE + forks)
    rig.standin.configure(stop_delay=1.0, clone_delay=1.0, start_delay=1.0)
    condition, delay, stopped = point
    rig.kill_at(condition, delay)  # and waits for the limactl children it left
    rig.standin.configure(stop_delay=0.0, clone_delay=0.0, start_delay=0.0)
    if stopped is None:
        stopped = status(rig, "agent-1") == "Stopped"
    assert (status(rig, "agent-1") == "Stopped") is stopped
    plan = rig.sand("plan")
    assert "will recover" in plan.stdout, plan.stdout
    assert (recovery in plan.stdout) is stopped, plan.stdout
    # Recovery starts the source; the plan then has nothing to do to it.
    targets = [arg for name in names for arg in ("--target", name)]
    proc = rig.sand("apply", "--auto-approve", *targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("started agent-1 again" in proc.stdout + proc.stderr) is stopped, proc.stdout
    assert status(rig, "agent-1") == "Running"  # not by the plan: agent-1 was not targeted
    rig.assert_converged(["agent-1", *names])
    assert status(rig, "agent-1") == "Running"
    assert source_files(rig) == before
    for name in names:
        assert sidecar(rig, name)["identity"] == name
    assert Journal(rig.journal).pending() == []
