"""``expires:`` in the plan: a VM past its time is deleted, and stays deleted.

Pure: the time now and the record of earlier expiries come in as values.

- A VM past its time is planned as a DELETE ("expired at ..."), so the
  unpushed-work guard sweeps it and the mass-delete guard counts it like any
  other; protected or locked, it is blocked instead.
- A VM that expired is not made again while its ``expires:`` says it has passed:
  an absolute time in the past says so by itself; for a duration, which counts
  from a creation that no longer exists, this host's record of the expiry
  (``sand.state.expired``) says so while the manifest keeps the same
  ``expires:``. The plan shows it as "expired, not created".
- A duration on a VM that does not record when it was made (an older sand made
  it) cannot be counted: the plan warns, and never deletes on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sand.desired import DesiredVM
from sand.manifest.expiry import format_instant
from sand.observed import Observation, ObservedVM, Ownership
from sand.plan.model import Action, VMChange
from sand.state.expired import ExpiredVM, Key

Expired = Mapping[Key, ExpiredVM]


def expiry_change(
    vm: DesiredVM, obs: Observation | None, now: float, expired: Expired
) -> tuple[VMChange | None, str | None]:
    """The change ``vm``'s expiry decides (None: plan it as usual), and a note for the plan."""
    if vm.expires is None or obs is None or obs.unknown_reason:
        return None, None  # an unknown backend is blocked by the planner anyway
    managed = [o for o in obs.vms if o.name == vm.name and o.ownership is Ownership.MANAGED]
    if len(managed) > 1:
        return None, None  # the planner blocks it: which one would expire?
    if managed:
        current = managed[0]
        created = current.marker.created_at if current.marker else 0
        deadline = vm.expires.deadline(created)
        if deadline is None:
            return None, (
                f"{vm.name} ({vm.backend}, {current.identity}): expires: {vm.expires.text} "
                "counts from the VM's creation, which it does not record (an older sand made "
                "it), so it is not deleted; write an absolute time, or `sand reset` it to "
                "start the clock"
            )
        if now < deadline:
            return None, None
        return _delete(vm, current, deadline), None
    if vm.expires.at is not None:
        deadline = vm.expires.at
    else:
        record = expired.get((vm.backend, vm.name))
        if record is None or record.expires != vm.expires.text:
            return None, None  # never expired here, or under another expires: make it
        deadline = record.at
    if now < deadline:
        return None, None
    when = format_instant(deadline)
    kept_absent = VMChange(
        vm.name,
        vm.backend,
        Action.NOOP,
        reasons=(f"expired at {when}, not created",),
        expired_at=deadline,
        desired=vm,
    )
    note = (
        f"{vm.name} ({vm.backend}) expired at {when} and is not created again: change or "
        "remove its expires: to have it back"
    )
    return kept_absent, note


def _delete(vm: DesiredVM, current: ObservedVM, deadline: float) -> VMChange:
    when = format_instant(deadline)
    base = partial(
        VMChange,
        vm=vm.name,
        backend=vm.backend,
        identity=current.identity,
        desired=vm,
        observed=current,
        expired_at=deadline,
    )
    if current.protect:
        return base(
            action=Action.BLOCKED,
            reasons=(
                f"expired at {when}, but protected: set protect: false (or clear the "
                "protection set on the backend) to let it be deleted",
            ),
        )
    if current.lock:
        return base(
            action=Action.BLOCKED,
            reasons=(f"expired at {when}; not deleted while locked ({current.lock})",),
        )
    return base(action=Action.DELETE, reasons=(f"expired at {when}",))
