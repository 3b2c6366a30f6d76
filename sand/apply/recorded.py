"""A listing that forgets is not believed: check it against what this host recorded.

The inventory (``sand.state.inventory``) holds every VM apply saw or made. A recorded
VM the listing does not show is checked directly by its id (the backend's
``vanished``): confirmed gone (id free, directory absent, or another VM on the id), it
is forgotten and may be made again; still there (or not checkable), the backend is
*unknown* for the run, so nothing is created in its place or pruned, and the reason
names the VM. A listing that shows none of a backend's recorded VMs is therefore only
believed when every one of them is confirmed gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sand.broker.client import revoke
from sand.desired import DesiredState
from sand.egress.registry import forget as forget_egress
from sand.observed import STOPPED, Ownership, RecordedVM
from sand.plan.model import Action, Plan
from sand.state.asleep import SleepRecord, load_asleep, save_asleep
from sand.state.expired import ExpiredVM, load_expired, save_expired
from sand.state.inventory import load_inventory, save_inventory
from sand.state.provlog import forget_provision_logs
from sand.state.records import forget_records

if TYPE_CHECKING:
    from sand.apply.engine import ApplyResult


def record_inventory(
    project: str,
    backends: Iterable[str],
    plan: Plan,
    result: ApplyResult | None = None,
) -> None:
    """Rewrite the inventory from this run: what was seen, made and removed.

    Backends that were unknown (or left the manifest) keep what was recorded."""
    previous = load_inventory(project)
    known = {rec.identity: rec for rec in previous}
    fresh_backends = {b for b in backends if b not in plan.unknown_backends}
    kept = [r for r in previous if r.backend not in fresh_backends]
    outcome = {(r.backend, r.vm): r for r in (result.results if result else [])}
    fresh: list[RecordedVM] = []
    for change in plan.changes:
        if change.backend not in fresh_backends:
            continue
        res = outcome.get((change.backend, change.vm))
        seen = change.observed
        if res is not None and res.ok and res.observed is not None:
            seen = res.observed  # created, replaced or updated: as it is now
        elif res is not None and res.ok and change.action in (Action.DELETE, Action.REPLACE):
            seen = None  # removed
        if seen is None or seen.ownership is not Ownership.MANAGED:
            continue
        before = known.get(seen.identity)
        incarnation = seen.marker.incarnation if seen.marker else ""
        if not incarnation and before is not None and before.backend == change.backend:
            incarnation = before.incarnation
        fresh.append(
            RecordedVM(
                backend=change.backend,
                name=seen.name,
                identity=seen.identity,
                incarnation=incarnation,
                node=seen.node or "",
            )
        )
    save_inventory(project, [*kept, *fresh])


def record_expired(project: str, desired: DesiredState, plan: Plan, result: ApplyResult) -> None:
    """Remember the VMs this run deleted for their ``expires:``, so the next plan keeps
    them absent (``sand.state.expired``); forget those whose ``expires:`` changed since."""
    previous = load_expired(project)
    expiry = {(vm.backend, vm.name): vm.expires.text for vm in desired.vms if vm.expires}
    kept = {k: r for k, r in previous.items() if expiry.get(k) == r.expires}
    done = {(r.backend, r.vm) for r in result.results if r.ok}
    for c in plan.changes:
        key = (c.backend, c.vm)
        gone = c.action is Action.DELETE and key in done
        if gone and c.expired_at is not None and key in expiry:
            kept[key] = ExpiredVM(c.backend, c.vm, expiry[key], c.expired_at)
    if kept != previous:
        save_expired(project, kept)


def forget_deleted(project: str, plan: Plan, result: ApplyResult) -> None:
    """A VM this run deleted leaves nothing of its own on this host (the security
    model's promise; the list is in docs/security.md): its last result, provisioning
    log, sleep record, broker grant and egress proxy entry go here; the inventory drops
    it as it records the run, the journal's entries go with its compaction, the
    backend's delete took its host-key pins."""
    done = {(r.backend, r.vm) for r in result.results if r.ok}
    gone = {
        (c.backend, c.vm)
        for c in plan.changes
        if c.action is Action.DELETE and (c.backend, c.vm) in done
    }
    if not gone:
        return
    forget_records(project, gone)
    forget_provision_logs(project, {vm for _, vm in gone})
    for backend, vm in gone:
        revoke(project, vm)  # its broker credential dies with it
        forget_egress(project, backend, vm)  # and its place at the egress proxy
    asleep = load_asleep(project)
    if any(key in asleep for key in gone):
        save_asleep(project, {k: r for k, r in asleep.items() if k not in gone})


def forget_claimed_spare(project: str, backend: str, spare: str) -> None:
    """A claim renamed ``spare``: the name is no VM's until its slot is refilled, so
    what this host let it reach goes now. Its broker credential dies (the claimed
    guest, which held it, is given its own) and its entry at the egress proxy goes
    (else the proxy would still vouch for the spare's credential from the claimed
    guest's address, until a refill's spare took the name, or forever when none
    does: a ``--target``ed apply, a pool made smaller)."""
    revoke(project, spare)
    forget_egress(project, backend, spare)


def forget_waking(project: str, plan: Plan) -> None:
    """Before the run: forget the VMs it will wake (any change acting on an asleep VM
    wakes it first). The backend takes the VM's own mark off before it starts it, so a
    run killed mid-wake leaves no claim that the VM sleeps; this host's record must not
    be one either. A run that fails before the wake loses nothing: the VM's mark,
    which every host reads, still says it sleeps."""
    records = load_asleep(project)
    waking = {(c.backend, c.vm) for c in plan.changes if c.asleep is not None and c.acts}
    kept = {k: r for k, r in records.items() if k not in waking}
    if kept != records:
        save_asleep(project, kept)


def record_asleep(project: str, plan: Plan, result: ApplyResult, now: float) -> None:
    """Remember the VMs this run put to sleep, and forget those it woke (any change
    that acted on an asleep VM woke it first): ``sand.state.asleep``."""
    previous = load_asleep(project)
    records = dict(previous)
    done = {(r.backend, r.vm): r for r in result.results if r.ok}
    for c in plan.changes:
        key = (c.backend, c.vm)
        if key not in done or c.identity is None:
            continue
        if c.sleep is not None:
            left = done[key].observed  # a hibernation the apply made a stop is a stop
            how = STOPPED if left is not None and not left.hibernated else c.sleep.how
            records[key] = SleepRecord(c.backend, c.vm, c.identity, how, now)
        elif c.asleep is not None and c.acts:
            records.pop(key, None)
    if records != previous:
        save_asleep(project, records)
