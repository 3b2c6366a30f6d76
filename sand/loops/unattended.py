"""One reconcile run nobody confirms: what ``apply --watch`` and ``sand sync`` make.

Each run opens the project afresh, settles the journal, observes and plans; only a
plan with changes takes the project's leases (``sand.apply.lease``), plans again
under them when another applier wrote meanwhile, and is carried out. Drift a
periodic run finds is corrected only with ``selfHeal: true`` (as Argo CD's); a
triggered run (a save, a new revision) corrects it. The mass-delete guard holds;
the unpushed-work guard holds (no ``--allow-data-loss`` here). A VM that keeps
failing is retried with exponential backoff (1 s doubling, 5 min cap) instead of
on every tick. Nothing here prints: what a run does goes to a :class:`RunReport`,
and comes back as a :class:`RunResult`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from sand.agentstate import AgentReport
from sand.apply.events import Hooks, NoHooks
from sand.apply.reconcile import ApplyOutcome, Prepared
from sand.apply.run import ApplyRun, AutoApprove, QuietView, RunEnd, Steering
from sand.backends.lease import LeaseBusy
from sand.defaults import UNATTENDED_LEASE_WAIT
from sand.errors import ErrorLayer, SandError
from sand.logs import get_logger
from sand.loops.notify import Announcer
from sand.loops.wakeups import PERIODIC
from sand.plan.model import Action, GuestAction, Plan
from sand.project import open_session
from sand.survey.agentread import AgentReader

BACKOFF_START, BACKOFF_CAP = 1.0, 300.0


class RunReport(Protocol):
    """Where an unattended run tells what it does; ``sand.cli`` prints it."""

    def note(self, text: str) -> None:
        """A line about the run itself (it starts, a refusal, a failure)."""

    def show_plan(self, plan: Plan) -> None:
        """The plan of a run, before it is carried out."""

    def show_outcome(self, outcome: ApplyOutcome) -> None:
        """What a run that changed something did."""


class Silent:
    def note(self, text: str) -> None:
        return None

    def show_plan(self, plan: Plan) -> None:
        return None

    def show_outcome(self, outcome: ApplyOutcome) -> None:
        return None


@dataclass
class Backoff:
    """Per-VM retry schedule after failures."""

    failures: dict[str, int] = field(default_factory=dict)
    not_before: dict[str, float] = field(default_factory=dict)

    def failed(self, vm: str, now: float) -> None:
        n = self.failures.get(vm, 0) + 1
        self.failures[vm] = n
        self.not_before[vm] = now + min(BACKOFF_CAP, BACKOFF_START * 2 ** (n - 1))

    def succeeded(self, vm: str) -> None:
        self.failures.pop(vm, None)
        self.not_before.pop(vm, None)

    def waiting(self, vm: str, now: float) -> bool:
        return self.not_before.get(vm, 0.0) > now


@dataclass(frozen=True)
class RunResult:
    """What one run found and did. ``error``: why it stopped short (its layer names
    where), None when it ran to the end (its outcome may still hold failed VMs)."""

    plan: Plan | None = None
    outcome: ApplyOutcome | None = None  # None: nothing was carried out
    error: SandError | None = None
    # VM -> what its agents reported after the run (None: not read; sand.survey.agentread)
    agents: dict[str, AgentReport] | None = None

    @property
    def ok(self) -> bool:
        """Ran to the end and everything converged: no VM failed, none is left blocked,
        no backend was unknown."""
        if self.error is not None:
            return False
        outcome = self.outcome or (ApplyOutcome(self.plan) if self.plan is not None else None)
        return outcome is None or outcome.converged

    def problems(self) -> list[str]:
        """Why it is not ok, one item each."""
        if self.error is not None:
            return [str(self.error)]
        plan = self.plan
        unknown = plan.unknown_backends if plan is not None else {}
        out = [f"backend {b} unknown ({why})" for b, why in sorted(unknown.items())]
        results = self.outcome.result.results if self.outcome and self.outcome.result else ()
        out += [f"{r.vm} failed [{r.layer}]" for r in results if not r.ok]
        if plan is not None:
            out += [f"{c.vm} blocked" for c in plan.changes if c.action is Action.BLOCKED]
        return out

    def failed_layers(self) -> list[str]:
        """The layer of each failure: the run's own error, each VM's, and "backend" for
        each backend that could not be observed."""
        if self.error is not None:
            return [self.error.layer]
        results = self.outcome.result.results if self.outcome and self.outcome.result else ()
        layers = [r.layer or ErrorLayer.APPLY for r in results if not r.ok]
        unknown = self.plan.unknown_backends if self.plan is not None else {}
        return layers + [ErrorLayer.BACKEND] * len(unknown)


@dataclass
class Reconciler:
    parallelism: int
    allow_mass_delete: bool
    command: str  # what the lease names: "watch", "sync"
    report: RunReport = field(default_factory=Silent)
    hooks: Hooks = field(default_factory=NoHooks)  # each run's progress events
    backoff: Backoff = field(default_factory=Backoff)
    lease_wait: float = UNATTENDED_LEASE_WAIT  # nobody is at the keyboard to retry
    # Reads the agents' state after each run, from the run's own plan: always with
    # ``always_read`` (sync --metrics), else when the manifest asks to be told (notify:).
    agents: AgentReader | None = None
    always_read: bool = False
    announce: Announcer | None = None  # tells the transitions each read shows

    async def run(
        self,
        manifest: Path,
        reason: str,
        *,
        host_dir: Path | None = None,
        revision: str = "",
        targets: Collection[str] = (),
    ) -> RunResult:
        """One run of ``manifest`` (``reason``: "periodic" or what triggered it);
        ``targets``: plan only these VMs, as ``--target`` does."""
        try:
            session = open_session(manifest, lock=True, lock_wait=30.0, host_dir=host_dir)
        except SandError as exc:
            self.report.note(str(exc))
            return RunResult(error=exc)
        run = ApplyRun(
            session,
            AutoApprove(),
            _Told(self.report, self.hooks, self.lease_wait),
            Steering(
                correct_drift=session.loaded.manifest.self_heal or reason != PERIODIC,
                allow_mass_delete=self.allow_mass_delete,
                targets=tuple(targets),
            ),
            parallelism=self.parallelism,
            command=self.command,
            revision=revision,
            lease_wait=self.lease_wait,
            hold_back=self._without_backed_off,
        )
        try:
            end = await run.run()
            result = self._result(end)
            if (
                self.agents is not None
                and result.plan is not None
                and (self.always_read or session.loaded.manifest.notify is not None)
            ):
                agents = await self.agents.read(result.plan, session.backends)
                result = replace(result, agents=agents)
                if self.announce is not None:
                    await asyncio.to_thread(self.announce, session.loaded, agents)
            return result
        except SandError as exc:
            get_logger().error(f"{self.command} run failed", error=str(exc), layer=exc.layer)
            self.report.note(str(exc))
            return RunResult(error=exc)
        finally:
            await session.close()

    def _result(self, end: RunEnd) -> RunResult:
        if end.refusal is not None:
            self.report.note(f"refused: {end.refusal}")
            return RunResult(plan=end.plan, error=end.refusal)
        outcome = end.outcome
        if outcome is None or outcome.result is None:
            return RunResult(plan=end.plan)
        self.report.show_outcome(outcome)
        now = time.monotonic()
        for r in outcome.result.results:
            if r.ok:
                self.backoff.succeeded(r.vm)
            else:
                self.backoff.failed(r.vm, now)
                self.report.note(f"{r.vm} failed [{r.layer}]: {r.error}")
        return RunResult(plan=end.plan, outcome=outcome)

    def _without_backed_off(self, plan: Plan) -> Plan:
        now = time.monotonic()
        kept = tuple(
            replace(c, action=Action.NOOP, guest=GuestAction.NONE)
            if self.backoff.waiting(c.vm, now)
            else c
            for c in plan.changes
        )
        return replace(plan, changes=kept)


class _Told(QuietView):
    """A run's plans and notes to its :class:`RunReport`."""

    def __init__(self, report: RunReport, hooks: Hooks, lease_wait: float) -> None:
        super().__init__(hooks)
        self.report = report
        self.lease_wait = lease_wait

    def waiting(self, busy: LeaseBusy) -> None:
        self.report.note(f"waiting (up to {self.lease_wait:.0f}s): {busy}")

    def recovered(self, lines: Collection[str]) -> None:
        for line in lines:
            self.report.note(f"Recovered: {line}")

    def planned(self, prepared: Prepared) -> None:
        self.report.show_plan(prepared.plan)

    def replanned(self, approved: Plan, now: Plan) -> None:
        self.report.note("another applier changed the VMs since they were observed: planned again")
        self.report.show_plan(now)
