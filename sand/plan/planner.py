"""Desired state × observed state → Plan. Pure: same inputs, same plan.

The rules, in the order they are applied to one desired VM:
1. its backend's listing could not be trusted → blocked (nothing is created or
   replaced on a guess);
2. no managed VM of that name → create (unless an unmanaged one holds the name
   on a backend where names are unique);
3. locked (clone, migrate, backup in flight) → blocked;
4. fields differ → replace if any field forces it, else update in place;
   guest fingerprint differs → reprovision; only secret values rotated (the
   stamp recorded on the VM differs) or the guest's tmpfs lost them (it
   booted after the last delivery) → deliver secrets;
5. equal fingerprints but observed values differ → drift ("changed outside
   sand"), corrected unless the caller only reports.
Managed VMs that no desired entry names are deleted, unless protected,
locked, or on a backend whose listing was untrusted. Before all of these, a VM
past its ``expires:`` is deleted, or kept absent (``expiry.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from sand.backends.capabilities import Capabilities
from sand.backends.protocol import RecoveryDecision
from sand.desired import DesiredState, DesiredVM
from sand.desired.fork import FORK_PREFIX
from sand.observed import Observation, ObservedVM, Ownership
from sand.plan.egress import refused_egress
from sand.plan.expiry import Expired, expiry_change
from sand.plan.fields import field_changes
from sand.plan.idle import Asleep, asleep_of, unknown_use
from sand.plan.model import (
    FORK_BLOCKER,
    RECORD,
    Action,
    Blocker,
    FieldChange,
    GuestAction,
    Plan,
    Strategy,
    VMChange,
)
from sand.plan.saved import fork_copy
from sand.plan.sleeps import maybe_sleep

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import GuestPresence

# A backend that declared nothing: every field compared, none mutable in place.
NO_CAPABILITIES = Capabilities()
# How much later than the last delivery a boot must look before its tmpfs counts as
# emptied: the boot time comes from one clock (the backend's, via uptime) and the
# delivery time from another (the host that delivered).
BOOT_SKEW = 60.0


def make_plan(
    desired: DesiredState,
    observations: Mapping[str, Observation],
    capabilities: Mapping[str, Capabilities],
    *,
    secret_stamps: Mapping[str, str] | None = None,
    secrets_lost: Mapping[str, str] | None = None,
    correct_drift: bool = True,
    refresh_only: bool = False,
    recovery: Sequence[RecoveryDecision] = (),
    now: float | None = None,
    expired: Expired | None = None,
    presence: Mapping[str, GuestPresence] | None = None,
    asleep: Mapping[str, Asleep] | None = None,
) -> Plan:
    """``secret_stamps``: VM name → the stamp of its secret values now (VMs that use
    secrets); ``secrets_lost``: VM name → why its guest no longer holds them (a
    guest check found the tmpfs emptied). ``recovery``: what replaying the journal
    does first; ``observations`` already show its outcome (a VM it removes is absent).
    ``now`` (default: the clock) and ``expired`` (this host's record of VMs deleted
    for their ``expires:``) decide expiry. ``presence``: VM name -> who used its guest,
    as its deep-check exchange told (VMs with an ``idle:`` policy); ``asleep``: this
    host's record of the VMs sand put to sleep (``sand.plan.idle``)."""
    stamps, lost = secret_stamps or {}, secrets_lost or {}
    now = time.time() if now is None else now
    changes: list[VMChange] = []
    notes: list[str] = []
    wanted: set[tuple[str, str]] = set()
    for vm in desired.vms:
        wanted.add((vm.backend, vm.name))
        obs = observations.get(vm.backend)
        # A VM without values may have lost what it was told too (the broker, the proxy).
        told = vm.name in stamps or vm.name in lost
        secrets = (stamps.get(vm.name), lost.get(vm.name)) if told else None
        lapsed, note = expiry_change(vm, obs, now, expired or {})
        if note:
            notes.append(note)
        can = capabilities.get(vm.backend, NO_CAPABILITIES)
        recorded = (asleep or {}).get(vm.name)
        change = lapsed or _plan_vm(vm, obs, can, secrets, recorded)
        if not lapsed and not refresh_only and can.sleeps:
            seen = (presence or {}).get(vm.name)
            change = maybe_sleep(change, seen, suspends=can.suspends)
            if why := unknown_use(vm.idle, seen):
                notes.append(f"{vm.name} ({vm.backend}) is not put to sleep: {why}")
        current = change.observed
        if current is not None and current.operator_protected and not vm.protect:
            notes.append(
                f"{vm.name} ({vm.backend}, {current.identity}): protection was set outside "
                "sand; `protect: false` does not lift it (clear it on the backend to let sand "
                "manage it)"
            )
        if refresh_only or (change.drift and not correct_drift and change.fields == change.drift):
            change = _report_only(change)
        else:
            change = refused_egress(change, vm, can, obs.egress_gap if obs else None)
        changes.append(change)
    entries = set(desired.backends)
    for backend, obs in observations.items():
        for o in obs.vms:
            owner = o.marker.backend if o.marker else ""
            if o.ownership is Ownership.OTHER_BACKEND and owner and owner not in entries:
                notes.append(
                    f"{o.name} ({backend}, {o.identity}) was made by backend entry {owner!r}, "
                    "which the manifest no longer has (renamed?); sand leaves it alone"
                )
        for observed in obs.managed():
            if (backend, observed.name) in wanted:
                continue
            change = _plan_delete(observed, obs)
            changes.append(_report_only(change) if refresh_only else change)
    unknown = {b: o.unknown_reason for b, o in observations.items() if o.unknown_reason}
    warnings = tuple(w for o in observations.values() for w in o.warnings) + tuple(notes)
    return Plan(
        project=desired.project,
        changes=tuple(changes),
        unknown_backends=unknown,
        warnings=warnings,
        observed_fingerprint=observation_fingerprint(observations),
        refresh_only=refresh_only,
        recovery=tuple(recovery),
    )


def _plan_vm(
    vm: DesiredVM,
    obs: Observation | None,
    can: Capabilities,
    secrets: tuple[str | None, str | None] | None,
    recorded: Asleep | None = None,
) -> VMChange:
    base = partial(VMChange, vm=vm.name, backend=vm.backend, desired=vm)
    if obs is None or obs.unknown_reason:
        why = obs.unknown_reason if obs else "backend was not observed"
        return base(action=Action.BLOCKED, reasons=(f"backend unknown: {why}",))
    same_name = obs.named(vm.name)
    managed = [o for o in same_name if o.ownership is Ownership.MANAGED]
    if len(managed) > 1:
        ids = ", ".join(o.identity for o in managed)
        return base(action=Action.BLOCKED, reasons=(f"several managed VMs claim this name: {ids}",))
    if not managed:
        ours_astray = [
            o
            for o in same_name
            if o.ownership is Ownership.UNMANAGED and o.marker and o.marker.project == vm.project
        ]
        if ours_astray:
            # Made by sand for this project, but not where this backend manages VMs (moved
            # out of its pool): never managed, and a new one would duplicate it.
            o = ours_astray[0]
            why = o.details.get("note") or "sand does not manage it"
            return base(
                action=Action.BLOCKED,
                reasons=(
                    f"VM {o.identity} carries this project's marker for this name ({why}); "
                    "move it back or remove it: a new one would duplicate it",
                ),
            )
        squatter = [o for o in same_name if o.ownership is not Ownership.MANAGED]
        if squatter and can.unique_names:
            owner = squatter[0].marker.backend if squatter[0].marker else ""
            if squatter[0].ownership is Ownership.OTHER_BACKEND:
                why = f"belongs to backend {owner!r} of this project"
            else:
                why = "is not managed by sand"
            return base(
                action=Action.BLOCKED,
                reasons=(f"an instance named {vm.name!r} exists and {why}",),
            )
        if vm.fork is not None:
            return _plan_fork(vm, obs, can, base)
        return base(action=Action.CREATE, guest=_whole(vm))
    current = managed[0]
    sleeping = asleep_of(current, recorded)
    base = partial(base, identity=current.identity, observed=current, asleep=sleeping)
    if sleeping is not None:
        # Asleep is not stopped: planned as the VM it is when awake (its lock is the
        # hibernation's own), and a change that acts on it wakes it first.
        power = "running" if vm.state == "running" else current.power
        current = replace(current, power=power, lock=None)
    if current.lock:
        return base(
            action=Action.BLOCKED, reasons=(f"operation in progress (lock={current.lock})",)
        )
    fields = field_changes(vm, current, can.field_policy)
    in_sync = current.fingerprint == vm.fingerprint
    drift = fields if in_sync else ()
    security = tuple(
        FieldChange("security", finding, "as generated", forces_replacement=True)
        for finding in current.findings
    )
    fields = fields + security
    drift = drift + security
    guest_changed = vm.provision and not in_sync and _guest_fp(current) != vm.guest_fingerprint
    deliver = _secrets_reason(current, *secrets) if vm.provision and secrets else None
    reasons: list[str] = []
    if any(f.forces_replacement for f in fields):
        if current.protect:
            return base(
                action=Action.BLOCKED,
                fields=fields,
                drift=drift,
                reasons=("must be replaced but is protected: set protect: false first",),
            )
        return base(
            action=Action.REPLACE,
            fields=fields,
            drift=drift,
            guest=_whole(vm),
            # What every backend can do; preflight downgrades it when the backend
            # cannot hold the old and the new VM at once.
            strategy=Strategy.CREATE_BEFORE_DESTROY,
        )
    if fields:
        if guest_changed:
            reasons.append("guest content changed")
        elif deliver:
            reasons.append(deliver)
        return base(
            action=Action.UPDATE,
            fields=fields,
            drift=drift,
            reasons=tuple(reasons),
            guest=_guest_action(guest_changed, deliver),
        )
    if guest_changed:
        return base(
            action=Action.NOOP,
            guest=GuestAction.PROVISION,
            reasons=("guest content changed (bundle, user, agents, packages, repos or secrets)",),
        )
    if deliver:
        return base(action=Action.NOOP, guest=GuestAction.SECRETS, reasons=(deliver,))
    if not in_sync:
        return base(action=Action.UPDATE, reasons=(RECORD,))
    return base(action=Action.NOOP)


def _plan_fork(
    vm: DesiredVM, obs: Observation, can: Capabilities, base: Callable[..., VMChange]
) -> VMChange:
    """A fork is created from its source as it is at apply time; it needs the source to
    be there (a source created by this same plan is not yet)."""
    assert vm.fork is not None
    if not can.fork:
        why = f"backend {vm.backend!r} cannot fork VMs yet"
        return base(action=Action.BLOCKED, blocked_action=Action.CREATE, reasons=(why,))
    source = vm.fork.source
    named = obs.named(source)
    if not [o for o in named if o.ownership is Ownership.MANAGED]:
        if named:  # a person's instance, a copy, another backend entry's VM: not ours
            why = (
                f"its source {source!r} is not a VM sand manages on backend {vm.backend!r} "
                f"(the VM of that name is {named[0].ownership.value}): sand forks only its own"
            )
        else:
            why = (
                f"its source {source!r} does not exist on backend {vm.backend!r} yet: apply "
                "once more after it is created"
            )
        # Located (FILE:LINE:COL of its from:) once the plan meets the manifest's file.
        blocker = Blocker(why, kind=FORK_BLOCKER)
        return base(action=Action.BLOCKED, blocked_action=Action.CREATE, blockers=(blocker,))
    if can.fork_stops_source:  # the plan says so; apply refuses it while the agent works
        vm = replace(vm, fork=replace(vm.fork, stops_source=True))
    return base(action=Action.CREATE, guest=_whole(vm), desired=vm, reasons=fork_copy(vm))


def _whole(vm: DesiredVM) -> GuestAction:
    """A new machine is provisioned whole, when the VM is provisioned at all."""
    return GuestAction.PROVISION if vm.provision else GuestAction.NONE


def _guest_action(guest_changed: bool, deliver: str | None) -> GuestAction:
    if guest_changed:
        return GuestAction.PROVISION
    return GuestAction.SECRETS if deliver else GuestAction.NONE


def _secrets_reason(current: ObservedVM, stamp: str | None, lost: str | None) -> str | None:
    """Why ``current`` needs its secrets delivered (values ``stamp`` now, None for none:
    then only for what it ``lost``), or None."""
    if current.power != "running":
        # A stopped guest holds no secrets; sand delivers them when it starts one (see
        # the engine), and one started elsewhere shows as booted after the delivery.
        return None
    if stamp is None:
        return lost
    recorded = current.marker.secrets if current.marker else ""
    if recorded != stamp:
        if not recorded:
            return "secrets not recorded on the VM (delivered by an older sand?): deliver once"
        return "secret values changed"
    if lost:
        return lost
    delivered_at = current.marker.secrets_at if current.marker else 0
    if current.booted_at is not None and current.booted_at > delivered_at + BOOT_SKEW:
        # The delivery time, not the boot time: PVE's boot time is now - uptime, which
        # moves by a second between two plans, and a saved plan must plan again alike.
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(delivered_at))
        return f"secrets lost (guest rebooted after their delivery at {when})"
    return None


def _guest_fp(vm: ObservedVM) -> str:
    return vm.marker.guest_fingerprint if vm.marker else ""


def _plan_delete(observed: ObservedVM, obs: Observation) -> VMChange:
    base = partial(
        VMChange,
        vm=observed.name,
        backend=observed.backend,
        identity=observed.identity,
        observed=observed,
    )
    if obs.unknown_reason:
        return base(action=Action.BLOCKED, reasons=("backend unknown: not pruned",))
    if observed.protect:
        return base(
            action=Action.BLOCKED,
            reasons=(
                "not in the manifest, but protected: unprotect it on the backend to delete it",
            ),
        )
    if observed.lock:
        return base(action=Action.BLOCKED, reasons=(f"not pruned while locked ({observed.lock})",))
    image = observed.marker.image if observed.marker else ""
    if image.startswith(FORK_PREFIX):
        # Made by `sand fork --apply`, whose entries were printed to be added: say so,
        # so the person adds the entry instead of losing the attempt.
        source = image[len(FORK_PREFIX) :]
        return base(
            action=Action.DELETE,
            reasons=(
                f"not in the manifest: a fork of {source} that no entry declares (made by "
                f"`sand fork --apply`?); to keep it, add under vms: `- name: {observed.name}` "
                f"with `from: {{vm: {source}}}`",
            ),
        )
    return base(action=Action.DELETE, reasons=("not in the manifest",))


def _report_only(change: VMChange) -> VMChange:

    return replace(
        change,
        action=Action.NOOP,
        fields=(),
        guest=GuestAction.NONE,
        strategy=None,
    )


def observation_fingerprint(observations: Mapping[str, Observation]) -> str:
    """A digest of what was observed, so a saved plan can tell the world moved."""
    rows: list[list[object]] = []
    for backend in sorted(observations):
        obs = observations[backend]
        rows.append([backend, obs.unknown_reason or ""])
        for vm in sorted(obs.vms, key=lambda v: (v.name, v.identity)):
            row: list[object] = [
                vm.name,
                vm.identity,
                vm.ownership.value,
                vm.fingerprint,
                vm.power,
                vm.cpus,
                vm.memory,
                vm.disk,
                vm.lock,
                vm.protect,
            ]
            if vm.cpu is not None:  # only where a backend reports one: other digests stay
                row.append(vm.cpu)
            rows.append(row)
    return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()[:32]
