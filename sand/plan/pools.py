"""Warm pools in the plan: which new VM claims which spare, and which spares refill.

Spares are planned as the VMs they are (created when missing, replaced when their
image changed, deleted when the pool shrinks: ``sand.desired.pools``). This pass,
before the golden bases are planned (a claim clones nothing), turns each create of
a VM naming ``pool:`` into the claim of a ready spare of that pool on its backend
(in manifest order, spares in slot order): a spare in sync, running, not locked,
asleep or out of date. The spare's own slot is then refilled in the same apply (a
create of a new spare under the claimed one's name, which waits for the rename).
With no spare ready, the VM is created as any VM, and says so. Pure: plan in, plan
out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sand.backends.capabilities import Capabilities
from sand.desired import DesiredState
from sand.manifest.pools import SPARE_INFIX
from sand.plan.model import Action, GuestAction, Plan, VMChange


def with_pools(plan: Plan, desired: DesiredState, capabilities: Mapping[str, Capabilities]) -> Plan:
    """``capabilities``: per backend, whether it claims spares at all; on one that does
    not, a VM naming a pool is made as any VM (and says so), never planned as a claim
    the engine would refuse."""
    if plan.refresh_only or not desired.pools:
        return plan
    ready: dict[tuple[str, str], list[VMChange]] = {}
    for c in plan.changes:
        if _claimable(c):
            assert c.desired is not None and c.desired.pool is not None
            ready.setdefault((c.backend, c.desired.pool), []).append(c)
    changes = list(plan.changes)
    claimed: dict[tuple[str, str], str] = {}  # (backend, spare) -> the VM claiming it
    for i, c in enumerate(changes):
        vm = c.desired
        if vm is None or vm.spare or vm.pool is None or c.action is not Action.CREATE:
            continue
        if plan.targets and c.vm not in plan.targets:
            continue
        can = capabilities.get(c.backend)
        if can is None or not can.claims:
            why = f"backend {c.backend} claims no spares: made as any VM"
            changes[i] = replace(c, reasons=(*c.reasons, why))
            continue
        spares = ready.get((c.backend, vm.pool))
        if not spares:
            why = f"no spare of pool {vm.pool} is ready: made as any VM"
            changes[i] = replace(c, reasons=(*c.reasons, why))
            continue
        spare = spares.pop(0)
        claimed[(spare.backend, spare.vm)] = c.vm
        # Not cloned: no golden base is waited for.
        changes[i] = replace(c, claims=spare.vm, claim=spare.observed, base=None)
    warm = dict(desired.pools)
    for i, c in enumerate(changes):
        by = claimed.get((c.backend, c.vm))
        if by is None:
            continue
        assert c.desired is not None and c.desired.pool is not None
        if plan.targets and c.vm not in plan.targets:
            # Left for the next apply: --target acts on the targets only.
            changes[i] = replace(c, reasons=(f"claimed by {by}: refilled by the next apply",))
            continue
        slot = int(c.vm.rpartition(SPARE_INFIX)[2])
        changes[i] = replace(
            c,
            action=Action.CREATE,
            guest=GuestAction.PROVISION if c.desired.provision else GuestAction.NONE,
            identity=None,
            observed=None,
            refill=(slot, warm.get(c.desired.pool, slot)),
            reasons=(f"refills the slot of {c.vm}, claimed by {by}",),
        )
    return replace(plan, changes=tuple(changes))


def _claimable(c: VMChange) -> bool:
    """A spare as its pool wants it, up and idle: what a claim may take now."""
    o = c.observed
    return (
        c.desired is not None
        and c.desired.spare
        and c.action is Action.NOOP
        and not c.acts
        and o is not None
        and o.power == "running"
        and not o.lock
        and c.asleep is None
        and not c.blockers
        and not _out_of_date(c)
    )


def _out_of_date(c: VMChange) -> bool:
    """Made from a golden base older than its image's: replaced, not claimed."""
    vm, o = c.desired, c.observed
    if vm is None or o is None or not vm.golden or vm.base is None:
        return False
    return (o.marker.base if o.marker else "") != vm.base.fingerprint
