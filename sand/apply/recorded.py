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

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from sand.backends.protocol import Backend
from sand.desired import DesiredState
from sand.errors import SandError
from sand.observed import Observation, Ownership, RecordedVM
from sand.plan.model import Action, Plan
from sand.state.expired import ExpiredVM, load_expired, save_expired
from sand.state.inventory import inventory_path, load_inventory, save_inventory

if TYPE_CHECKING:
    from sand.apply.engine import ApplyResult


async def check_recorded(
    project: str,
    backends: Mapping[str, Backend],
    observations: Mapping[str, Observation],
    *,
    settling: Mapping[str, set[str]] | None = None,
) -> dict[str, Observation]:
    """``observations`` with each backend whose listing forgot a VM made unknown.

    ``settling``: per backend, identities a pending journal entry is about (recovery
    decides those, not this check)."""
    out = dict(observations)
    recorded: dict[str, list[RecordedVM]] = {}
    for rec in load_inventory(project):
        recorded.setdefault(rec.backend, []).append(rec)
    for name, records in recorded.items():
        obs, backend = out.get(name), backends.get(name)
        if obs is None or backend is None or obs.unknown_reason:
            continue
        listed = {vm.identity for vm in obs.vms}
        skip = (settling or {}).get(name, set())
        missing = [r for r in records if r.identity not in listed and r.identity not in skip]
        if not missing:
            continue
        try:
            answers = await backend.vanished(missing)
        except SandError as exc:
            answers = {
                r.identity: f"VM {r.identity} ({r.name}) could not be checked: {exc}"
                for r in missing
            }
        still = [why for why in answers.values() if why]
        if not still:
            continue  # every missing one is confirmed gone: forgotten
        head = ""
        if len(missing) == len(records):
            head = f"the listing shows none of the {len(records)} VMs sand recorded here; "
        hint = (
            f" (a VM that left this backend on purpose: remove it from {inventory_path(project)})"
        )
        out[name] = replace(obs, unknown_reason=head + "; ".join(still) + hint)
    return out


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
