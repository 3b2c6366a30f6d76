"""``sand plan``, ``sand apply`` and ``sand destroy``: the prompts, the summaries and
the exit codes around the reconcile loop (which itself prints nothing)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sand.apply.reconcile import ApplyOutcome, Prepared
from sand.cli.exits import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from sand.cli.outcome import report_outcome
from sand.errors import PlanRefused
from sand.plan import Action, Plan
from sand.plan.render import plan_to_json, render_text
from sand.project import Session

if TYPE_CHECKING:
    from sand.apply.lease import ProjectLeases
    from sand.backends.lease import LeaseBusy


def use_colour(stream: Any) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org);
    ``--no-color`` sets it (``sand.cli.main``)."""
    import os

    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def cmd_plan(args: argparse.Namespace) -> int:
    from sand.apply.reconcile import compute_plan
    from sand.project import open_session

    session = open_session(args.manifest, lock=False)

    async def run() -> Plan:
        try:
            return await compute_plan(
                session,
                refresh_only=args.refresh_only,
                allow_data_loss=args.allow_data_loss,
                targets=args.target,
                replace_vms=args.replace,
            )
        finally:
            await session.close()

    plan = asyncio.run(run())
    if args.out:
        from sand.apply.planfile import save_plan

        save_plan(args.out, session, plan)
    if args.json:
        print(json.dumps(plan_to_json(plan), indent=2, default=str))
    else:
        sys.stdout.write(render_text(plan, colour=use_colour(sys.stdout)))
        if args.out:
            print(f"\nSaved the plan to {args.out}; apply it with: sand apply {args.out}")
    if plan.unknown_backends:
        # A plan that could not see a backend is incomplete, not "no changes".
        return EXIT_ERROR
    if any(c.action is Action.BLOCKED for c in plan.changes):
        # Apply would refuse these and exit 1: a plan must not read as fine (CI gates).
        print("Error: the plan has blocked changes (marked !); see above.", file=sys.stderr)
        return EXIT_ERROR
    if args.detailed_exitcode and (plan.has_changes or (args.refresh_only and plan.drifted())):
        return EXIT_CHANGES
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    if args.watch:
        if args.allow_data_loss:
            raise PlanRefused(
                "--allow-data-loss is never used with --watch: a save must not destroy work"
            )
        if args.target or args.replace:
            raise PlanRefused("--target and --replace are for one apply, never with --watch")
        from sand.cli.watch import watch

        return watch(args)
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=args.parallelism,
        allow_mass_delete=args.allow_mass_delete,
        as_json=args.json,
        progress_mode="log" if args.log_format == "json" else "auto",
        allow_data_loss=args.allow_data_loss,
        targets=args.target,
        replace_vms=args.replace,
        lease_wait=args.lease_wait,
    )


def cmd_reset(args: argparse.Namespace) -> int:
    """``sand reset VM``: the VM replaced from its image, its ``preserve:`` paths carried
    over — exactly ``sand apply --replace VM --target VM`` (same prompt, same guards)."""
    try:
        return _reset(args)
    except PlanRefused as exc:
        # The person typed `sand reset VM`, not the flags it stands for.
        message = str(exc)
        for flag in ("--replace", "--target"):
            message = message.replace(f"{flag} {args.vm!r}", f"sand reset {args.vm!r}", 1)
        raise PlanRefused(message) from None


def _reset(args: argparse.Namespace) -> int:
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=1,
        allow_mass_delete=False,
        as_json=False,
        progress_mode="log" if args.log_format == "json" else "auto",
        allow_data_loss=args.allow_data_loss,
        targets=[args.vm],
        replace_vms=[args.vm],
        command="reset",
    )


def cmd_destroy(args: argparse.Namespace) -> int:
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=10,
        allow_mass_delete=True,
        as_json=False,
        destroy=True,
        allow_data_loss=args.allow_data_loss,
        command="destroy",
    )


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
) -> int:
    from sand.apply.planfile import read_plan_file, saved_steering
    from sand.project import open_session

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
    session = open_session(manifest, lock=True)
    run = _Run(
        session,
        parallelism=parallelism,
        allow_mass_delete=allow_mass_delete,
        as_json=as_json,
        destroy=destroy,
        progress_mode="json" if as_json else progress_mode,
        allow_data_loss=allow_data_loss,
        ask=not auto_approve,
        targets=tuple(targets),
        replace_vms=tuple(replace_vms),
        command=command,
        lease_wait=lease_wait,
    )
    return asyncio.run(run.apply(saved))


@dataclass(frozen=True)
class _Run:
    """One ``sand apply``/``destroy``/``reset`` run: its options, typed once."""

    session: Session
    ask: bool  # confirm with the person before anything changes
    parallelism: int
    allow_mass_delete: bool
    as_json: bool
    destroy: bool
    progress_mode: str
    allow_data_loss: bool
    targets: tuple[str, ...]
    replace_vms: tuple[str, ...]
    command: str = "apply"  # what the lease names
    lease_wait: float = 0.0  # seconds to wait for another applier's lease

    async def apply(self, saved: dict[str, Any] | None) -> int:
        from sand.apply.lease import ProjectLeases
        from sand.backends.lease import LeaseHolder

        holder = LeaseHolder.here(command=self.command)
        leases = ProjectLeases(self.session, holder, wait=self.lease_wait, on_wait=_waiting)
        try:
            async with leases:
                return await self._apply(saved, leases)
        finally:
            await self.session.close()

    async def _apply(self, saved: dict[str, Any] | None, leases: ProjectLeases) -> int:
        from sand.apply.lease import leased, same_changes
        from sand.apply.reconcile import (
            carry_out,
            mass_delete_problem,
            recover_and_plan,
            settle_unchanged,
        )
        from sand.cli.progress import progress_view

        session = self.session

        async def plan() -> Prepared:
            return await recover_and_plan(
                session,
                destroy=self.destroy,
                allow_data_loss=self.allow_data_loss,
                targets=self.targets,
                replace_vms=self.replace_vms,
                before_replay=leases.for_replay,
            )

        prepared = await plan()
        print_recovered(prepared)
        plan_seen = prepared.plan
        if saved is not None:
            from sand.apply.planfile import check_still_valid

            check_still_valid(saved, session, plan_seen)
        if self.as_json:
            # The stream's first line: the plan about to run (the last: its outcome).
            from sand.cli.progress import write_json_line

            body = {"plan": plan_to_json(plan_seen), "recovered": list(prepared.recovered)}
            write_json_line(sys.stdout, "plan", body)
        else:
            sys.stdout.write(render_text(plan_seen, colour=use_colour(sys.stdout)))
        if not plan_seen.has_changes:
            outcome = settle_unchanged(session, prepared)
            if self.as_json:
                report_outcome(outcome, as_json=True)
            return self._exit_code(outcome)
        problem = mass_delete_problem(plan_seen)
        if problem and not self.allow_mass_delete:
            raise PlanRefused(problem)
        if self.ask and not _approved(self.destroy):
            print("Apply cancelled.")
            return EXIT_ERROR
        prepared, again = await leased(leases, prepared, plan)
        if again:
            print_recovered(prepared)
            if saved is not None:
                from sand.apply.planfile import check_still_valid

                check_still_valid(saved, session, prepared.plan)  # another wrote: stale?
            if (self.ask or saved is not None) and not same_changes(plan_seen, prepared.plan):
                # What was approved is not what would run: a person decides again.
                raise PlanRefused(
                    "another applier changed the VMs since this plan was made; nothing was "
                    "done: run sand apply again to see the plan as it is now"
                )
            problem = mass_delete_problem(prepared.plan)
            if problem and not self.allow_mass_delete:
                raise PlanRefused(problem)
            if not self.as_json and not same_changes(plan_seen, prepared.plan):
                print("\nAnother applier changed the VMs meanwhile; the plan now:\n")
                sys.stdout.write(render_text(prepared.plan, colour=use_colour(sys.stdout)))
            if not prepared.plan.has_changes:
                return self._exit_code(settle_unchanged(session, prepared))
        from sand.cli.inflight import track

        with progress_view(self.progress_mode) as view:
            outcome = await carry_out(
                session,
                prepared,
                parallelism=self.parallelism,
                hooks=track(view),  # what Ctrl-C will say was left in progress
                allow_data_loss=self.allow_data_loss,
            )
        report_outcome(outcome, self.as_json)
        return self._exit_code(outcome)

    def _exit_code(self, outcome: ApplyOutcome) -> int:
        """0 only when everything converged: a failure, an unknown backend or a
        blocked VM is not."""
        if not outcome.ok:
            return EXIT_ERROR
        parts = outcome.not_converged()
        if not parts:
            return EXIT_OK
        if not self.as_json:
            print(f"Not converged: {', '.join(parts)}.", file=sys.stderr)
        return EXIT_ERROR


def _approved(destroy: bool) -> bool:
    from sand.cli.confirm import apply_question, confirm

    return confirm("\n" + apply_question(destroy))


def _waiting(busy: LeaseBusy) -> None:
    print(f"Waiting for the lease: {busy}", file=sys.stderr, flush=True)


def print_recovered(prepared: Prepared) -> None:
    for line in prepared.recovered:
        print(f"Recovered: {line}", file=sys.stderr)
