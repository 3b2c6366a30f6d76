"""An idle VM's planned sleep: the one change the idle policy adds to a plan."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sand.observed import STOPPED, SUSPENDED
from sand.plan.idle import STOP_LOSES, Sleep, sleep_for
from sand.plan.model import Action, FieldChange, VMChange
from sand.plan.saved import delivered, unremovable

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import GuestPresence


def maybe_sleep(change: VMChange, presence: GuestPresence | None, *, suspends: bool) -> VMChange:
    """A running VM with nothing else to do whose idle policy is met goes to sleep."""
    vm, current = change.desired, change.observed
    if vm is None or current is None or change.acts or change.action is Action.BLOCKED:
        return change
    if change.asleep is not None or current.power != "running" or vm.state != "running":
        return change
    sleep = sleep_for(
        vm.idle,
        presence,
        booted_at=current.booted_at,
        suspends=suspends,
        unremovable=unremovable(vm, presence) if suspends else (),
    )
    if sleep is None:
        return change
    if sleep.how == SUSPENDED:
        sleep = replace(sleep, scrubbed=delivered(vm))
    return replace(
        change,
        action=Action.UPDATE,
        fields=(FieldChange("power", "running", sleep.how),),
        reasons=(sleep.why, *saved_words(sleep)),
        sleep=sleep,
    )


def saved_words(sleep: Sleep) -> tuple[str, ...]:
    """What the plan says of the memory a sleep saves, or why it saves none."""
    said: list[str] = []
    if sleep.held:
        said.append(
            "stopped, not hibernated: its saved memory would hold "
            f"{', '.join(sleep.held)} (idle keepMemory: true allows it)"
        )
    if sleep.scrubbed:
        said.append(
            f"removed before its memory is saved, delivered again at wake: "
            f"{', '.join(sleep.scrubbed)}"
        )
    if sleep.kept:
        said.append(f"its saved memory keeps (keepMemory): {', '.join(sleep.kept)}")
    if sleep.how == STOPPED:
        said.append(STOP_LOSES)
    return tuple(said)
