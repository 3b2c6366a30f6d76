"""``--replace`` and ``--target``: steps on a finished plan, pure data in and out.

Both run after the planner has planned the whole fleet, so everything that
counts the fleet (the mass-delete guard above all) still sees every VM:

- ``--replace VM`` turns the VM's change into a replacement although nothing
  forces one — the same REPLACE (create-before-destroy, provisioned, its
  ``preserve:`` paths carried over) that a changed image plans, so preflight
  and the unpushed-work guard treat it exactly alike;
- ``--target VM`` keeps the changes of the named VMs and turns every other one
  into a no-op that stays in the plan (with the VM it observed): it is left as
  it is, is not shown as a change, and apply never runs it. As in Terraform,
  the plan then says that targeting is in effect: it may be incomplete.

A name that no change carries (not in the manifest, not a VM sand manages) is
refused before anything runs: a typo must not read as "no changes".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sand.errors import PlanRefused
from sand.plan.model import Action, GuestAction, Plan, Strategy, VMChange

REQUESTED = "replacement requested with --replace"
PROTECTED = "must be replaced but is protected: set protect: false first"
LEFT_ALONE = "not targeted: left as it is"


def check_names(flag: str, names: Collection[str], known: Collection[str], why: str) -> None:
    """Refuse the names of ``names`` not in ``known``; ``why`` says what ``known`` holds."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        listed = ", ".join(repr(n) for n in unknown)
        raise PlanRefused(f"{flag} {listed}: {why}")


def no_such_vm(project: str, unknown_backends: Collection[str]) -> str:
    why = f"no VM of that name in the manifest, and none that project {project!r} manages"
    if unknown_backends:
        why += f" on the backends it could observe (unknown: {', '.join(sorted(unknown_backends))})"
    return why


def steer(plan: Plan, *, targets: Collection[str] = (), replace_vms: Collection[str] = ()) -> Plan:
    """The plan with ``--replace`` and then ``--target`` applied (either may be empty)."""
    if replace_vms:
        plan = with_replacements(plan, replace_vms)
    if targets:
        plan = targeted(plan, targets)
    return plan


def with_replacements(plan: Plan, names: Collection[str]) -> Plan:
    wanted = {c.vm for c in plan.changes if c.desired is not None}
    check_names(
        "--replace",
        names,
        wanted,
        "not a VM of the manifest (a VM it does not name would be destroyed, not replaced)",
    )
    for c in plan.changes:
        if c.vm in names and c.expired_at is not None:
            raise PlanRefused(
                f"--replace {c.vm!r}: it has expired ({c.reasons[0]}), so the plan deletes it "
                "or keeps it absent; change its expires: to have it again"
            )
    changes = tuple(
        _replacement(c) if c.vm in names and c.desired is not None else c for c in plan.changes
    )
    return replace(plan, changes=changes, replacements=tuple(sorted(set(names))))


def _replacement(change: VMChange) -> VMChange:
    """``change`` as a requested replacement. A VM not made yet is simply created; one
    that cannot be changed now (backend unknown, locked, a name taken) stays blocked."""
    current, vm = change.observed, change.desired
    assert vm is not None
    if change.action in (Action.CREATE, Action.BLOCKED) or current is None:
        return change
    if current.protect:
        return replace(
            change,
            action=Action.BLOCKED,
            guest=GuestAction.NONE,
            strategy=None,
            reasons=(REQUESTED, PROTECTED),
        )
    return replace(
        change,
        action=Action.REPLACE,
        # A new machine is provisioned whole, when the VM is provisioned at all.
        guest=GuestAction.PROVISION if vm.provision else GuestAction.NONE,
        strategy=Strategy.CREATE_BEFORE_DESTROY,
        reasons=(REQUESTED,),
    )


def targeted(plan: Plan, names: Collection[str]) -> Plan:
    known = {c.vm for c in plan.changes}
    check_names("--target", names, known, no_such_vm(plan.project, plan.unknown_backends))
    chosen = set(names)
    changes = tuple(c if c.vm in chosen else _left_alone(c) for c in plan.changes)
    # A backend no target lives on is not this run's business: its VMs are left alone
    # whether it could be seen or not, so it does not fail the run.
    on = {c.backend for c in plan.changes if c.vm in chosen}
    unknown = {b: why for b, why in plan.unknown_backends.items() if b in on}
    untouched = tuple(
        f"backend {b!r} is unknown this run ({why}); no target is on it"
        for b, why in sorted(plan.unknown_backends.items())
        if b not in on
    )
    listed = ", ".join(sorted(chosen))
    warning = (
        f"Resource targeting is in effect: only {listed} is planned; the plan may be "
        "incomplete (the changes the manifest asks of the other VMs are not shown and will "
        "not be made). --target is for exceptional cases, such as recovering from an error."
    )
    return replace(
        plan,
        changes=changes,
        unknown_backends=unknown,
        warnings=(warning, *plan.warnings, *untouched),
        targets=tuple(sorted(chosen)),
    )


def _left_alone(change: VMChange) -> VMChange:
    """A change not targeted: kept (with what it observed, for the guards that count the
    fleet) as a no-op that apply never runs."""
    moved = change.acts or change.action is Action.BLOCKED
    return replace(
        change,
        action=Action.NOOP,
        fields=(),
        drift=(),
        guest=GuestAction.NONE,
        blocked_action=None,
        blockers=(),
        strategy=None,
        work_preserved=(),
        reasons=(LEFT_ALONE,) if moved else change.reasons,
    )
