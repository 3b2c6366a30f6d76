"""How long the plan's idle read waits for a guest: at least one SSH try, as every other
path that reaches a running guest waits (sand.defaults). A shorter read gave up on a
loaded host's guest that the run's own agent read reached seconds later, so the guest
was asked twice in one run and taken for one that does not answer (never idle)."""

from __future__ import annotations

import inspect

from sand.defaults import GUEST_SSH_TRY
from sand.survey.agentread import READ_TIMEOUT as BOARD_READ
from sand.survey.idle import READ_TIMEOUT, read_guests


def test_the_idle_read_gives_a_guest_one_whole_ssh_try_and_time_for_its_check() -> None:
    assert READ_TIMEOUT > GUEST_SSH_TRY
    assert inspect.signature(read_guests).parameters["timeout"].default == READ_TIMEOUT


def test_the_plan_waits_at_least_as_long_as_the_read_after_it_would() -> None:
    # The run's read of the agents after the plan asks again only when the plan's read
    # had no answer: a plan's read shorter than that read is the one that gives up first.
    assert READ_TIMEOUT >= BOARD_READ
