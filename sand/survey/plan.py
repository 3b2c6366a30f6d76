"""The plan, read from the world: what ``sand plan`` shows and every apply approves.

Nothing here changes anything: the backends are listed, the journal's open entries
folded in as their replay will leave them, and the planned changes preflighted and
swept for unpushed work.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import partial

from sand.observed import Observation
from sand.plan import make_plan
from sand.plan.bases import with_bases
from sand.plan.egress import EGRESS_BLOCKER
from sand.plan.generated import with_items_gone
from sand.plan.model import FORK_BLOCKER, Plan, VMChange
from sand.plan.pools import with_pools
from sand.plan.targeting import steer
from sand.project import Session, observe_all
from sand.state.expired import load_expired
from sand.survey.guest_secrets import GuestSecrets, check_guests
from sand.survey.host_services import services_lost
from sand.survey.idle import asleep_records, read_guests
from sand.survey.recovered import recovered_view


async def compute_plan(
    session: Session,
    *,
    refresh_only: bool = False,
    correct_drift: bool = True,
    destroy: bool = False,
    secrets: GuestSecrets | None = None,
    unsettled: Mapping[str, str] | None = None,
    checks: bool = True,
    guest_checks: bool = True,
    allow_data_loss: bool = False,
    targets: Collection[str] = (),
    replace_vms: Collection[str] = (),
) -> Plan:
    """``unsettled``: backends whose journal replay failed, planned as unknown.

    ``targets`` (``--target``): plan only these VMs; ``replace_vms`` (``--replace``):
    replace these although nothing forces it (``sand.plan.targeting``).

    ``checks``: preflight the planned changes and sweep the VMs to be deleted or
    replaced for unpushed work (blocked unless ``allow_data_loss``). Off only for
    read-only views such as ``sand status``.

    ``guest_checks``: ask the guests of no-op VMs whether their tmpfs still holds
    their secrets (one SSH session each). Off for ``sand status``, which contacts a
    guest only when asked (``--deep``, :mod:`sand.survey.health`).

    Journal entries still open (``sand plan`` never replays them) are folded in: what
    replaying them will do is listed first, and planned as done.
    """
    desired = session.desired
    if destroy:
        desired = replace(desired, vms=())
    observations = await observe_all(session.backends, desired)
    for name, why in (unsettled or {}).items():
        observations[name] = Observation(backend=name, vms=(), unknown_reason=why)
    observations, recovery = await recovered_view(
        session.journal, session.project, session.backends, observations, skip=unsettled or {}
    )
    stamps = (secrets or GuestSecrets(session)).stamps(desired) if not refresh_only else {}
    expired = load_expired(session.project)
    asleep = asleep_records(session.project)
    now = time.time()  # one clock for both passes: a VM expires in both or in neither
    planned = partial(
        make_plan,
        desired,
        observations,
        session.capabilities(),
        secret_stamps=stamps,
        correct_drift=correct_drift,
        refresh_only=refresh_only,
        recovery=recovery,
        now=now,
        expired=expired,
        asleep=asleep,
    )
    plan = planned()
    sleepy = guest_checks and not refresh_only
    told = await read_guests(plan, session.backends) if sleepy else {}
    presence = {vm: f.presence for vm, f in told.items() if f.presence is not None}
    # What this host serves its VMs (the broker, the egress proxy) and no longer runs.
    lost = {} if refresh_only else services_lost(session.project, desired)
    warnings: tuple[str, ...] = ()
    if stamps and guest_checks:
        # Where a listing cannot show a reboot inside the guest (Lima), ask the guests
        # of otherwise no-op VMs whether their tmpfs still holds what was delivered.
        found, warnings = await check_guests(plan, observations, session.backends)
        lost = found | lost
    if lost or warnings or presence:
        # Planned again with what the guests told: secrets gone, and who used them
        # (which idle VMs sleep).
        plan = planned(secrets_lost=lost, presence=presence)
        plan = replace(plan, warnings=plan.warnings + warnings)
    if told:
        # What the guests' agents said in the same exchange: the run's own read of them
        # after it is carried out takes it from here (one exchange per guest per run).
        agents = {vm: f.agents for vm, f in told.items() if f.agents is not None}
        plan = replace(plan, agents=agents)
    # After planning the whole fleet, before the checks: only what will run is checked,
    # and the mass-delete guard still counts every VM.
    plan = with_items_gone(plan, desired.manifest, session.desired.notes)
    plan = steer(plan, targets=targets, replace_vms=replace_vms)
    if destroy:
        plan = _as_destroy(plan, {vm.name for vm in session.desired.vms})
    # Which new VMs claim a spare (and which spares refill), before the bases: a claim
    # clones nothing, a refill is cloned from its pool's base.
    plan = with_pools(plan, desired, session.capabilities())
    if guest_checks and not refresh_only and any(c.stops_source for c in plan.changes):
        # here, not at the top: sand plan starts without the guests' check
        from sand.survey.forksource import blocked_forks

        # A fork that stops its source waits while the source's agent is at work.
        plan = await blocked_forks(plan, session.backends)
    if any(b.kind in (FORK_BLOCKER, EGRESS_BLOCKER) for c in plan.changes for b in c.blockers):
        # only for a fork that waits, or an egress policy its backend cannot enforce
        from sand.survey.preflight import located_blockers

        plan = located_blockers(plan, session)
    # Golden bases last: which creates (the --replace'd too) are cloned from which base.
    plan = with_bases(plan, desired, observations)
    if checks and not refresh_only and plan.has_changes:
        # here, not at the top: sand plan starts without it
        from sand.survey.guard import guard_plan

        # here, not at the top: sand plan starts without it
        from sand.survey.preflight import preflight_plan

        plan = await preflight_plan(plan, session)
        plan = await guard_plan(plan, session, allow_data_loss=allow_data_loss)
    return plan


_DESTROY = "sand destroy deletes every VM of the project"


def _as_destroy(plan: Plan, declared: set[str]) -> Plan:
    """``sand destroy`` plans against a manifest of no VMs; a VM the file does declare
    is deleted because destroy deletes the project, not because the file left it out."""

    def said(change: VMChange) -> VMChange:
        if change.vm not in declared:
            return change
        why = tuple(r.replace("not in the manifest", _DESTROY, 1) for r in change.reasons)
        return replace(change, reasons=why)

    return replace(plan, changes=tuple(said(c) for c in plan.changes))
