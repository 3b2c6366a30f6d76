"""One apply run: recover → plan → approve → lease → plan again when the grant is not
fresh → carry out → outcome.

``sand apply`` (and ``destroy``, ``reset``), the board's ``a``, and each run of
``apply --watch`` and ``sand sync`` are this one run; they differ only in who
approves (:class:`Approver`: the terminal question, ``--auto-approve``, a saved plan,
the board's dialog, nobody) and where it is told (:class:`RunView`). Nothing here
prints or asks.

Another applier may write between the plan and the lease (the grant is then not
fresh): the run plans again under the lease, before anything changes. What happens
next is decided here, once: a plan a person approved runs only if it still does the
same (otherwise nothing is done and they decide again); a run nobody confirms goes on
with the new plan, which meets the same guards as the first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sand.apply.events import Hooks, NoHooks
from sand.apply.lease import ProjectLeases, leased, same_changes
from sand.apply.reconcile import (
    ApplyOutcome,
    Prepared,
    carry_out,
    mass_delete_problem,
    recover_and_plan,
    settle_unchanged,
)
from sand.backends.lease import LeaseBusy, LeaseHolder
from sand.defaults import PARALLELISM
from sand.errors import PlanRefused
from sand.plan.model import Plan
from sand.project import Session

SUPERSEDED = (
    "another applier changed the VMs since this plan was made; nothing was done: "
    "plan again to see the plan as it is now"
)


class Approver(Protocol):
    """Who says yes to a plan."""

    @property
    def person(self) -> bool:
        """A person approves the plan as they see it (a saved plan: when it was saved).
        When another applier changes it meanwhile, nothing runs."""
        ...

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        """Whether ``plan`` may run. ``problem``: why it may not, whatever the answer
        (the mass-delete guard): shown, not asked. A plan with no changes comes here
        too (the board shows it); its answer does not matter."""
        ...


@dataclass(frozen=True)
class AutoApprove:
    """``--auto-approve``, a saved plan (``person=True``), a run nobody confirms."""

    person: bool = False

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        return problem is None


class RunView(Protocol):
    """Where a run is told; every method may do nothing."""

    def waiting(self, busy: LeaseBusy) -> None:
        """Another applier holds a lease this run waits for."""

    def recovered(self, lines: Collection[str]) -> None:
        """What settling the journal did, before each plan."""

    def planned(self, prepared: Prepared) -> None:
        """The plan, before it is approved."""

    def replanned(self, approved: Plan, now: Plan) -> None:
        """Another applier wrote since ``approved`` was made: ``now`` is what runs."""

    def carrying_out(self) -> contextlib.AbstractContextManager[Hooks]:
        """Around carrying the plan out: the engine's events go to the hooks."""
        ...


class QuietView:
    """A view that tells nothing; the engine's events to ``hooks``."""

    def __init__(self, hooks: Hooks | None = None) -> None:
        self.hooks: Hooks = hooks or NoHooks()

    def waiting(self, busy: LeaseBusy) -> None:
        return None

    def recovered(self, lines: Collection[str]) -> None:
        return None

    def planned(self, prepared: Prepared) -> None:
        return None

    def replanned(self, approved: Plan, now: Plan) -> None:
        return None

    @contextlib.contextmanager
    def carrying_out(self) -> Iterator[Hooks]:
        yield self.hooks


@dataclass(frozen=True)
class Steering:
    """What a run plans: as ``sand plan``'s flags say."""

    destroy: bool = False
    correct_drift: bool = True
    allow_data_loss: bool = False
    allow_mass_delete: bool = False
    targets: tuple[str, ...] = ()
    replace_vms: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunEnd:
    """How a run ended. ``outcome`` None: nothing was carried out, because the
    approver said no, or ``refusal`` says why."""

    plan: Plan  # the last plan made
    outcome: ApplyOutcome | None = None
    refusal: PlanRefused | None = None


@dataclass
class ApplyRun:
    session: Session
    approver: Approver
    view: RunView
    steering: Steering = Steering()
    parallelism: int = PARALLELISM
    command: str = "apply"  # what the lease names
    revision: str = ""  # what the lease names as the revision applied (sync)
    lease_wait: float = 0.0  # seconds to wait for another applier's lease
    # A saved plan (``sand plan -out``): it runs only while each plan is still exact.
    saved: dict[str, Any] | None = None
    # Changes this run leaves out of each plan (a VM whose retries back off).
    hold_back: Callable[[Plan], Plan] | None = None

    async def run(self) -> RunEnd:
        """The run, under the project's leases (taken before its first change, given
        back when it ends). The session stays open: whoever opened it closes it."""
        holder = LeaseHolder.here(command=self.command, revision=self.revision)
        leases = ProjectLeases(
            self.session, holder, wait=self.lease_wait, on_wait=self.view.waiting
        )
        async with leases:
            return await self._run(leases)

    async def _plan(self, leases: ProjectLeases) -> Prepared:
        s = self.steering
        prepared = await recover_and_plan(
            self.session,
            destroy=s.destroy,
            correct_drift=s.correct_drift,
            allow_data_loss=s.allow_data_loss,
            targets=s.targets,
            replace_vms=s.replace_vms,
            before_replay=leases.for_replay,
        )
        self.view.recovered(prepared.recovered)
        if self.hold_back is not None:
            prepared = replace(prepared, plan=self.hold_back(prepared.plan))
        if self.saved is not None:
            from sand.survey.planfile import check_still_valid  # a saved plan's run only

            check_still_valid(self.saved, self.session, prepared.plan)
        return prepared

    def _problem(self, plan: Plan) -> str | None:
        return None if self.steering.allow_mass_delete else mass_delete_problem(plan)

    async def _run(self, leases: ProjectLeases) -> RunEnd:
        session = self.session
        prepared = await self._plan(leases)
        approved = prepared.plan
        self.view.planned(prepared)
        problem = self._problem(approved)
        yes = await self.approver.approve(approved, problem)
        if problem:
            return RunEnd(approved, refusal=PlanRefused(problem))
        if not approved.has_changes:
            return RunEnd(approved, settle_unchanged(session, prepared))
        if not yes:
            return RunEnd(approved)
        while True:  # ends: leases once held stay held, and a held one is fresh
            prepared, again = await leased(leases, prepared, lambda: self._plan(leases))
            if not again:
                break
            now = prepared.plan
            if self.approver.person and not same_changes(approved, now):
                return RunEnd(now, refusal=PlanRefused(SUPERSEDED))
            self.view.replanned(approved, now)
            if problem := self._problem(now):
                return RunEnd(now, refusal=PlanRefused(problem))
            if not now.has_changes:
                return RunEnd(now, settle_unchanged(session, prepared))
        with self.view.carrying_out() as hooks:
            outcome = await carry_out(
                session,
                prepared,
                parallelism=self.parallelism,
                hooks=hooks,
                allow_data_loss=self.steering.allow_data_loss,
            )
        return RunEnd(prepared.plan, outcome)
