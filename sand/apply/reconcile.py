"""The reconcile loop, once: recover → observe → plan → (the CLI confirms) → execute.

Nothing here talks to people: what a run did comes back as data (``Prepared``,
``ApplyOutcome``) and its progress as events (``sand.apply.events``); ``sand.cli``
prints, asks and maps the exit codes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from sand.apply.audited import audit_apply
from sand.apply.events import Hooks
from sand.apply.provisioning import make_base_provisioner, make_provisioner
from sand.apply.recorded import (
    forget_claimed_spare,
    forget_deleted,
    forget_waking,
    record_asleep,
    record_expired,
    record_inventory,
)
from sand.apply.recovery import replay_journal
from sand.backends.abilities import Warns
from sand.plan import Action, Plan
from sand.plan.targeting import check_names, no_such_vm
from sand.project import Session, observe_all
from sand.state.paths import project_dir
from sand.state.records import record_results
from sand.survey.guest_secrets import GuestSecrets
from sand.survey.plan import compute_plan

if TYPE_CHECKING:
    from sand.apply.engine import ApplyResult


@dataclass(frozen=True)
class Prepared:
    """A plan ready to be approved, with what settling the journal did first."""

    plan: Plan
    secrets: GuestSecrets
    recovered: tuple[str, ...] = ()  # one line per journal entry the replay settled


@dataclass(frozen=True)
class ApplyOutcome:
    """What an apply did: the CLI prints it and maps it to an exit code."""

    plan: Plan
    result: ApplyResult | None = None  # None: nothing ran (no changes)
    recovered: tuple[str, ...] = ()
    seconds: float = 0.0
    # What backends reported while applying (e.g. a PVE task's "WARNINGS: n").
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.result is None or self.result.ok

    def not_converged(self) -> list[str]:
        """Why the fleet is not as the manifest says although nothing failed: a backend
        nobody could observe, a VM left blocked."""
        parts = [f"backend {b} unknown" for b in sorted(self.plan.unknown_backends)]
        parts += [f"{c.vm} blocked" for c in self.plan.changes if c.action is Action.BLOCKED]
        return parts

    @property
    def converged(self) -> bool:
        return self.ok and not self.not_converged()


async def recover_and_plan(
    session: Session,
    *,
    destroy: bool = False,
    correct_drift: bool = True,
    allow_data_loss: bool = False,
    targets: Collection[str] = (),
    replace_vms: Collection[str] = (),
    before_replay: Callable[[], Awaitable[None]] | None = None,
) -> Prepared:
    """Settle what a crashed run left (the journal first, always), then plan.

    ``before_replay``: awaited first when the journal holds entries to replay (a
    replay changes backends: the run takes their leases there)."""
    await _check_names(session, targets, replace_vms)
    if before_replay is not None and session.journal.pending():
        await before_replay()
    recovery = await replay_journal(session.journal, session.backends)
    secrets = GuestSecrets(session)
    plan = await compute_plan(
        session,
        destroy=destroy,
        secrets=secrets,
        correct_drift=correct_drift,
        unsettled=recovery.failed,
        allow_data_loss=allow_data_loss,
        targets=targets,
        replace_vms=replace_vms,
    )
    return Prepared(plan, secrets, tuple(recovery.done))


async def _check_names(
    session: Session, targets: Collection[str], replace_vms: Collection[str]
) -> None:
    """Refuse a name no VM has before the journal replay changes anything: a VM to
    replace must be in the manifest; a target may also be one sand manages (one it will
    delete), which only a listing (read-only) shows."""
    in_manifest = {vm.name for vm in session.desired.vms}
    check_names("--replace", replace_vms, in_manifest, "not a VM of the manifest")
    if set(targets) <= in_manifest:
        return
    observations = await observe_all(session.backends, session.desired)
    managed = {o.name for obs in observations.values() for o in obs.managed()}
    unknown = [b for b, o in observations.items() if o.unknown_reason]
    check_names("--target", targets, in_manifest | managed, no_such_vm(session.project, unknown))


def settle_unchanged(session: Session, prepared: Prepared) -> ApplyOutcome:
    """Nothing to do: record what was seen (the inventory), and say so."""
    record_inventory(session.project, session.backends, prepared.plan)
    return ApplyOutcome(prepared.plan, recovered=prepared.recovered)


async def carry_out(
    session: Session,
    prepared: Prepared,
    *,
    parallelism: int,
    hooks: Hooks | None = None,
    allow_data_loss: bool = False,
) -> ApplyOutcome:
    """Execute an approved plan and record each VM's outcome."""
    # The engine is imported by an apply only: a plan never runs it.
    from sand.apply.engine import execute

    # here, not at the top: sand apply starts without it
    from sand.survey.guard import refuse_if_holding

    plan = prepared.plan
    started = time.monotonic()
    forget_waking(session.project, plan)
    result = await execute(
        plan,
        session.backends,
        session.journal,
        make_provisioner(session, prepared.secrets),
        parallelism=parallelism,
        hooks=hooks,
        guard=None if allow_data_loss else refuse_if_holding,
        archives=project_dir(session.project) / "preserve",
        base_provisioner=make_base_provisioner(session),
        released=partial(forget_claimed_spare, session.project),
    )
    record_results(session.project, result.results)
    audit_apply(session, plan, result)
    record_inventory(session.project, session.backends, plan, result)
    record_expired(session.project, session.desired, plan, result)
    record_asleep(session.project, plan, result, time.time())
    forget_deleted(session.project, plan, result)
    if not session.journal.pending():
        session.journal.compact()
    warnings = tuple(
        f"backend {name}: {warning}"
        for name, backend in session.backends.items()
        if isinstance(backend, Warns)
        for warning in backend.warnings
    )
    return ApplyOutcome(
        plan, result, prepared.recovered, time.monotonic() - started, warnings=warnings
    )


def mass_delete_problem(plan: Plan) -> str | None:
    """Why this plan destroys too much to run without --allow-mass-delete, or None.

    Destroyed: every VM the run deletes or replaces (a replace destroys the old VM).
    Too much, per backend and for the whole project: more than half of the managed
    VMs (when more than one), or all of them with none left wanted — what an emptied
    or truncated manifest, or a backend that mistakes another's VMs for its own, does.
    """
    managed: dict[str, int] = {}
    doomed: dict[str, int] = {}
    remaining: dict[str, int] = {}
    for c in plan.changes:
        if c.observed is not None or c.claim is not None:  # a spare being claimed too
            managed[c.backend] = managed.get(c.backend, 0) + 1
        if c.action in (Action.DELETE, Action.REPLACE):
            doomed[c.backend] = doomed.get(c.backend, 0) + 1
        if c.desired is not None:
            remaining[c.backend] = remaining.get(c.backend, 0) + 1

    def too_many(count: int, total: int, wanted: int) -> bool:
        return (count == total and not wanted) or (count > 1 and count * 2 > total)

    advice = "re-run with --allow-mass-delete if that is intended"
    for backend, count in sorted(doomed.items()):
        total = max(managed.get(backend, count), count)
        if too_many(count, total, remaining.get(backend, 0)):
            return (
                f"the plan deletes or replaces {count} of {total} managed VMs on backend "
                f"{backend!r}; {advice}"
            )
    count = sum(doomed.values())
    total = max(sum(managed.values()), count)
    if count and len(managed) > 1 and too_many(count, total, sum(remaining.values())):
        return (
            f"the plan deletes or replaces {count} of {total} managed VMs across "
            f"{len(managed)} backends; {advice}"
        )
    return None
