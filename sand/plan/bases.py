"""Golden bases in the plan: which to build, which VMs are cloned from one, which to delete.

Pure, like the planner; applied to a finished plan (after ``--target``/``--replace``
have shaped it) with the same observations:

1. A VM made from an image under ``images`` whose marker names another base than the
   image's current one is *out of date*: shown, and left as it is, unless it says
   ``rebuild: onBaseChange`` (then it is replaced; protected: blocked).
2. A create or replace of a VM made from an image is cloned from the image's base:
   the ready one the listing shows, else one this plan builds. Every image a VM
   names gets its base built when it has none (so the VMs out of date can be reset
   onto it), except in a targeted plan, where only what the targets need is built.
3. A create or replace of any other provisioned VM is cloned from a base derived from
   its machine content when one is ready, or when two or more creates of this plan
   share that content (one build then serves them all); else it is made as before.
4. A base is deleted only when nothing wants it (no VM of the manifest has its
   fingerprint), no VM the listing shows was made from it (after this plan's own
   deletes and replacements), and nothing holds it now (a lock, a clone running); a
   half-made one (a build that did not finish) likewise, and a retired one (a kind of
   base the backend no longer uses, saying why). Only bases the backend
   read as this project's own, from this backend entry, are ever listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sand.desired import DesiredState, DesiredVM
from sand.desired.spec import DesiredBase
from sand.observed import Observation, ObservedBase
from sand.plan.model import Action, BaseAction, BaseChange, GuestAction, Plan, Strategy, VMChange

Key = tuple[str, str]  # (backend, base fingerprint)
ONBASECHANGE = "onBaseChange"


def with_bases(plan: Plan, desired: DesiredState, observations: Mapping[str, Observation]) -> Plan:
    if plan.refresh_only:
        return plan
    trusted = {b for b, o in observations.items() if not o.unknown_reason}
    ready: dict[Key, ObservedBase] = {
        (b, base.fingerprint): base
        for b in trusted
        for base in observations[b].bases
        if base.ready and base.fingerprint
    }
    changes = [_rebuilt(c) for c in plan.changes]
    builds: dict[Key, BaseChange] = {}
    wants: dict[Key, list[int]] = {}
    for i, c in enumerate(changes):
        base = _base_of(c)
        if base is not None and c.backend in trusted:
            wants.setdefault((c.backend, base.fingerprint), []).append(i)
    for key, indexes in wants.items():
        base = _base_of(changes[indexes[0]])
        assert base is not None
        acting = [i for i in indexes if changes[i].acts]
        if key not in ready and not base.declared and len(acting) < 2:
            continue  # one VM alone: making it directly costs less than a base and a clone
        for i in indexes:
            changes[i] = replace(changes[i], base=base.fingerprint)
        if key not in ready:
            builds[key] = _build(base, tuple(changes[i].vm for i in acting))
    if not plan.targets:
        for vm in desired.vms:
            if vm.golden and vm.base is not None and vm.backend in trusted:
                key = (vm.backend, vm.base.fingerprint)
                if key not in ready and key not in builds:
                    builds[key] = _build(vm.base, ())
    deletes, notes = ([], []) if plan.targets else _deletes(desired, observations, trusted, changes)
    return replace(
        plan,
        changes=tuple(changes),
        bases=(*builds.values(), *deletes),
        warnings=(*plan.warnings, *notes),
    )


def _base_of(change: VMChange) -> DesiredBase | None:
    """The base a create or replace of ``change`` would clone from, if it has one."""
    shown = change.blocked_action or change.action
    if shown not in (Action.CREATE, Action.REPLACE) or change.desired is None:
        return None
    if change.claims is not None:  # a claimed spare is renamed, not cloned
        return None
    return change.desired.base


# What a base's disk holds of secrets (docs/security.md): its clones copy it.
BASE_HOLDS = (
    "it holds no secret and no agent login: none is delivered to its build machine, and "
    "a login made there is removed before it is frozen"
)


def _build(base: DesiredBase, for_vms: tuple[str, ...]) -> BaseChange:
    reason = (
        f"image {base.name!r} has no base with its current content on this backend"
        if base.declared
        else f"{len(for_vms)} new VMs share their image, user, packages, agents and docker"
    )
    return BaseChange(
        backend=base.backend,
        name=base.name,
        action=BaseAction.BUILD,
        fingerprint=base.fingerprint,
        reasons=(reason, BASE_HOLDS),
        for_vms=for_vms,
        desired=base,
    )


def _rebuilt(change: VMChange) -> VMChange:
    """``change`` with what its golden image says: out of date, or replaced."""
    vm, current = change.desired, change.observed
    if vm is None or current is None or not vm.golden or vm.base is None:
        return change
    if change.action in (Action.CREATE, Action.DELETE, Action.BLOCKED):
        return change
    made = current.marker.base if current.marker is not None else ""
    if made == vm.base.fingerprint:
        return change
    why = _stale(vm, made)
    if change.action is Action.REPLACE or vm.rebuild != ONBASECHANGE:
        return replace(change, out_of_date=why)
    reason = f"{why}; rebuild: onBaseChange replaces it with a VM of the new base"
    if current.protect:
        return replace(
            change,
            action=Action.BLOCKED,
            blocked_action=Action.REPLACE,
            guest=GuestAction.PROVISION if vm.provision else GuestAction.NONE,
            reasons=(
                *change.reasons,
                reason,
                "must be replaced but is protected: set protect: false first",
            ),
            out_of_date=why,
        )
    return replace(
        change,
        action=Action.REPLACE,
        guest=GuestAction.PROVISION if vm.provision else GuestAction.NONE,
        reasons=(*change.reasons, reason),
        strategy=Strategy.CREATE_BEFORE_DESTROY,
        out_of_date=why,
    )


def _stale(vm: DesiredVM, made: str) -> str:
    assert vm.base is not None
    if not made:
        return (
            f"made without a record of image {vm.base.name!r}'s base; the image is now "
            f"{vm.base.fingerprint}"
        )
    return (
        f"made from an earlier build of image {vm.base.name!r} ({made}); the image is now "
        f"{vm.base.fingerprint}"
    )


def _deletes(
    desired: DesiredState,
    observations: Mapping[str, Observation],
    trusted: set[str],
    changes: list[VMChange],
) -> tuple[list[BaseChange], list[str]]:
    wanted = {(vm.backend, vm.base.fingerprint) for vm in desired.vms if vm.base is not None}
    # VMs this plan removes (deletes, and the old VM of each replacement).
    leaving = {
        (c.backend, c.observed.name)
        for c in changes
        if c.acts and c.observed is not None and c.action in (Action.DELETE, Action.REPLACE)
    }
    deletes: list[BaseChange] = []
    notes: list[str] = []
    for backend in sorted(trusted):
        for base in observations[backend].bases:
            if base.ready and (backend, base.fingerprint) in wanted:
                continue
            still = [n for n in base.made if (backend, n) not in leaving]
            if still:
                continue  # the VMs made from it keep it (out of date, or a person's copies)
            where = f"{base.name} ({backend}, {base.identity})"
            if base.busy:
                notes.append(f"base {where} is not deleted now: {base.busy}")
                continue
            why = base.retired or (
                "half-made: a build that did not finish (nothing was cloned from it)"
                if not base.ready
                else "no VM of the manifest needs it any more, and none was made from it"
            )
            deletes.append(
                BaseChange(
                    backend=backend,
                    name=base.name,
                    action=BaseAction.DELETE,
                    fingerprint=base.fingerprint,
                    identity=base.identity,
                    reasons=(why,),
                    observed=base,
                )
            )
    return deletes, notes
