"""An idle VM's planned sleep: the one change the idle policy adds to a plan."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sand.observed import STOPPED
from sand.plan.idle import STOP_LOSES, sleep_for
from sand.plan.model import Action, FieldChange, VMChange

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import GuestPresence


def maybe_sleep(change: VMChange, presence: GuestPresence | None, *, suspends: bool) -> VMChange:
    """A running VM with nothing else to do whose idle policy is met goes to sleep."""
    vm, current = change.desired, change.observed
    if vm is None or current is None or change.acts or change.action is Action.BLOCKED:
        return change
    if change.asleep is not None or current.power != "running" or vm.state != "running":
        return change
    sleep = sleep_for(vm.idle, presence, booted_at=current.booted_at, suspends=suspends)
    if sleep is None:
        return change
    reasons = (sleep.why, STOP_LOSES) if sleep.how == STOPPED else (sleep.why,)
    return replace(
        change,
        action=Action.UPDATE,
        fields=(FieldChange("power", "running", sleep.how),),
        reasons=reasons,
        sleep=sleep,
    )
