"""One apply run as a person starts it (``sand apply``, ``destroy``, ``reset`` and
``fork --apply``): the terminal question, the plan and progress shown, the summary and
the exit code around ``sand.apply.run.ApplyRun`` (which itself prints nothing)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from sand import asyncrun
from sand.apply.events import Hooks
from sand.apply.lease import same_changes
from sand.apply.reconcile import ApplyOutcome, Prepared
from sand.apply.run import ApplyRun, Approver, AutoApprove, RunEnd, Steering
from sand.backends.lease import LeaseBusy
from sand.cli.colour import use_colour
from sand.cli.confirm import apply_question, confirm
from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.cli.inflight import track
from sand.cli.outcome import report_outcome
from sand.cli.progress import progress_view, write_json_line
from sand.errors import PlanRefused
from sand.manifest.loader import LoadedManifest
from sand.plan import Plan
from sand.plan.render import plan_to_json, render_text
from sand.project import open_session
from sand.survey.planfile import read_plan_file, saved_steering


def run_apply(
    manifest: str | Path,
    *,
    auto_approve: bool,
    parallelism: int,
    allow_mass_delete: bool,
    as_json: bool,
    destroy: bool = False,
    progress_mode: str = "auto",
    allow_data_loss: bool = False,
    targets: Collection[str] = (),
    replace_vms: Collection[str] = (),
    command: str = "apply",
    lease_wait: float = 0.0,
    loaded: LoadedManifest | None = None,
) -> int:
    """``loaded``: the manifest to apply, as read already (``sand fork --apply``: the
    file with the forks added in memory); default: the file as it is."""
    saved = read_plan_file(manifest)
    if saved is not None:
        # A saved plan was approved when it was made; it runs only if still exact, and
        # it is planned again with the --target and --replace it was made with.
        if targets or replace_vms:
            raise PlanRefused(
                f"{manifest} is a saved plan: it carries its own --target and --replace"
            )
        manifest, auto_approve = saved["manifest"], True
        targets, replace_vms = saved_steering(saved)
    if not auto_approve and not sys.stdin.isatty():
        raise PlanRefused(
            "no terminal to confirm on; re-run with --auto-approve to apply unattended"
        )
    session = open_session(manifest, lock=True, loaded=loaded)
    view = _Console(as_json=as_json, progress_mode="json" if as_json else progress_mode)
    approver: Approver = (
        AutoApprove(person=saved is not None) if auto_approve else _Question(destroy)
    )
    run = ApplyRun(
        session,
        approver,
        view,
        Steering(
            destroy=destroy,
            allow_data_loss=allow_data_loss,
            allow_mass_delete=allow_mass_delete,
            targets=tuple(targets),
            replace_vms=tuple(replace_vms),
        ),
        parallelism=parallelism,
        command=command,
        lease_wait=lease_wait,
        saved=saved,
    )

    async def apply() -> RunEnd:
        try:
            return await run.run()
        finally:
            await session.close()

    end = asyncrun.run(apply())
    if end.refusal is not None:
        raise end.refusal
    if end.outcome is None:
        print("Apply cancelled.")
        return EXIT_ERROR
    if end.outcome.result is not None or as_json:
        report_outcome(end.outcome, as_json)
    return _exit_code(end.outcome, as_json)


def _exit_code(outcome: ApplyOutcome, as_json: bool) -> int:
    """0 only when everything converged: a failure, an unknown backend or a blocked VM
    is not."""
    if not outcome.ok:
        return EXIT_ERROR
    parts = outcome.not_converged()
    if not parts:
        return EXIT_OK
    if not as_json:
        print(f"Not converged: {', '.join(parts)}.", file=sys.stderr)
    return EXIT_ERROR


@dataclass(frozen=True)
class _Question:
    """The terminal question: only ``yes`` approves."""

    destroy: bool
    person: bool = True

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        if problem or not plan.has_changes:
            return False
        return _approved(self.destroy)


@dataclass(frozen=True)
class _Console:
    """``sand apply``'s terminal: the plan as text (or the JSON stream's first line),
    the live progress while the plan is carried out."""

    as_json: bool
    progress_mode: str

    def waiting(self, busy: LeaseBusy) -> None:
        print(f"Waiting for the lease: {busy}", file=sys.stderr, flush=True)

    def recovered(self, lines: Collection[str]) -> None:
        for line in lines:
            print(f"Recovered: {line}", file=sys.stderr)

    def planned(self, prepared: Prepared) -> None:
        if self.as_json:
            # The stream's first line: the plan about to run (the last: its outcome).
            body = {"plan": plan_to_json(prepared.plan), "recovered": list(prepared.recovered)}
            write_json_line(sys.stdout, "plan", body)
        else:
            sys.stdout.write(render_text(prepared.plan, colour=use_colour(sys.stdout)))

    def replanned(self, approved: Plan, now: Plan) -> None:
        if not self.as_json and not same_changes(approved, now):
            print("\nAnother applier changed the VMs meanwhile; the plan now:\n")
            sys.stdout.write(render_text(now, colour=use_colour(sys.stdout)))

    @contextlib.contextmanager
    def carrying_out(self) -> Iterator[Hooks]:
        with progress_view(self.progress_mode) as view:
            yield track(view)  # what Ctrl-C will say was left in progress


def _approved(destroy: bool) -> bool:
    return confirm("\n" + apply_question(destroy))
