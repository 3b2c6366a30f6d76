"""The reconcile loop, once: recover → observe → plan → (confirm) → execute."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sand.apply.engine import ApplyResult, execute
from sand.apply.progress import progress_reporter
from sand.apply.provisioning import GuestSecrets, check_guests, make_provisioner
from sand.apply.recorded import record_inventory
from sand.apply.recovery import recovered_view, replay_journal
from sand.desired import DesiredState
from sand.errors import PlanRefused
from sand.observed import Observation
from sand.plan import Action, Plan, make_plan
from sand.plan.render import plan_to_json, render_text, use_colour
from sand.project import Session, observe_all, open_session
from sand.state.records import record_results
from sand.terminal import continued

EXIT_OK, EXIT_ERROR = 0, 1


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
) -> Plan:
    """``unsettled``: backends whose journal replay failed, planned as unknown.

    ``checks``: preflight the planned changes and sweep the VMs to be deleted or
    replaced for unpushed work (blocked unless ``allow_data_loss``). Off only for
    read-only views such as ``sand status``.

    ``guest_checks``: ask the guests of no-op VMs whether their tmpfs still holds
    their secrets (one SSH session each). Off for ``sand status``, which contacts a
    guest only when asked (``--deep``, :mod:`sand.apply.health`).

    Journal entries still open (``sand plan`` never replays them) are folded in: what
    replaying them will do is listed first, and planned as done.
    """
    desired = session.desired
    if destroy:
        desired = DesiredState(desired.project, desired.manifest, ())
    observations = await observe_all(session.backends, desired)
    for name, why in (unsettled or {}).items():
        observations[name] = Observation(backend=name, vms=(), unknown_reason=why)
    observations, recovery = await recovered_view(
        session.journal, session.project, session.backends, observations, skip=unsettled or {}
    )
    stamps = (secrets or GuestSecrets(session)).stamps(desired) if not refresh_only else {}
    plan = make_plan(
        desired,
        observations,
        session.capabilities(),
        secret_stamps=stamps,
        correct_drift=correct_drift,
        refresh_only=refresh_only,
        recovery=recovery,
    )
    if stamps and guest_checks:
        # Where a listing cannot show a reboot inside the guest (Lima), ask the guests
        # of otherwise no-op VMs whether their tmpfs still holds what was delivered.
        lost, warnings = await check_guests(plan, observations, session.backends)
        if lost or warnings:
            plan = make_plan(
                desired,
                observations,
                session.capabilities(),
                secret_stamps=stamps,
                secrets_lost=lost,
                correct_drift=correct_drift,
                recovery=recovery,
            )
            plan = replace(plan, warnings=plan.warnings + warnings)
    if checks and not refresh_only and plan.has_changes:
        from sand.apply.guard import guard_plan
        from sand.apply.preflight import preflight_plan

        plan = await preflight_plan(plan, session)
        plan = await guard_plan(plan, session, allow_data_loss=allow_data_loss)
    return plan


async def recover_and_plan(
    session: Session,
    *,
    destroy: bool = False,
    correct_drift: bool = True,
    allow_data_loss: bool = False,
) -> tuple[Plan, GuestSecrets]:
    """Settle what a crashed run left (the journal first, always), then plan."""
    recovery = await replay_journal(session.journal, session.backends)
    for line in recovery.done:
        print(f"Recovered: {line}", file=sys.stderr)
    secrets = GuestSecrets(session)
    plan = await compute_plan(
        session,
        destroy=destroy,
        secrets=secrets,
        correct_drift=correct_drift,
        unsettled=recovery.failed,
        allow_data_loss=allow_data_loss,
    )
    return plan, secrets


async def carry_out(
    session: Session,
    plan: Plan,
    secrets: GuestSecrets,
    *,
    parallelism: int,
    progress_mode: str,
    as_json: bool = False,
    allow_data_loss: bool = False,
) -> ApplyResult:
    """Execute an approved plan, record per-VM outcomes and print the summary."""
    from sand.apply.guard import refuse_if_holding
    from sand.state.paths import project_dir

    started = time.monotonic()
    with progress_reporter(progress_mode) as say:
        result = await execute(
            plan,
            session.backends,
            session.journal,
            make_provisioner(session, secrets),
            parallelism=parallelism,
            progress=say,
            guard=None if allow_data_loss else refuse_if_holding,
            archives=project_dir(session.project) / "preserve",
        )
    record_results(session.project, result)
    record_inventory(session.project, session.backends, plan, result)
    if not session.journal.pending():
        session.journal.compact()
    report_result(plan, result, time.monotonic() - started, as_json)
    _print_backend_warnings(session, as_json)
    return result


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
        if c.observed is not None:
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
) -> int:
    from sand.apply.planfile import read_plan_file

    saved = read_plan_file(manifest)
    if saved is not None:
        # A saved plan was approved when it was made; it runs only if still exact.
        manifest, auto_approve = saved["manifest"], True
    session = open_session(manifest, lock=True)
    return asyncio.run(
        _apply(
            session,
            auto_approve,
            parallelism,
            allow_mass_delete,
            as_json,
            destroy,
            saved,
            "json" if as_json else progress_mode,
            allow_data_loss,
        )
    )


async def _apply(
    session: Session,
    auto_approve: bool,
    parallelism: int,
    allow_mass_delete: bool,
    as_json: bool,
    destroy: bool,
    saved: dict[str, Any] | None,
    progress_mode: str,
    allow_data_loss: bool = False,
) -> int:
    try:
        if not auto_approve and not sys.stdin.isatty():
            raise PlanRefused(
                "no terminal to confirm on; re-run with --auto-approve to apply unattended"
            )
        plan, secrets = await recover_and_plan(
            session, destroy=destroy, allow_data_loss=allow_data_loss
        )
        if saved is not None:
            from sand.apply.planfile import check_still_valid

            check_still_valid(saved, session, plan)
        if not as_json:
            sys.stdout.write(render_text(plan, colour=use_colour(sys.stdout)))
        if not plan.has_changes:
            record_inventory(session.project, session.backends, plan)
            if as_json:
                print(json.dumps({"plan": plan_to_json(plan), "results": []}, indent=2))
            return _converged_code(plan, as_json)
        problem = mass_delete_problem(plan)
        if problem and not allow_mass_delete:
            raise PlanRefused(problem)
        if not auto_approve and not _confirm(destroy):
            print("Apply cancelled.")
            return EXIT_ERROR
        result = await carry_out(
            session,
            plan,
            secrets,
            parallelism=parallelism,
            progress_mode=progress_mode,
            as_json=as_json,
            allow_data_loss=allow_data_loss,
        )
        if not result.ok:
            return EXIT_ERROR
        return _converged_code(plan, as_json)
    finally:
        await session.close()


def _converged_code(plan: Plan, as_json: bool) -> int:
    """0 only when everything converged: an unknown backend or a blocked VM is not."""
    blocked = [c for c in plan.changes if c.action is Action.BLOCKED]
    if not plan.unknown_backends and not blocked:
        return EXIT_OK
    if not as_json:
        parts = [f"backend {b} unknown" for b in sorted(plan.unknown_backends)]
        parts += [f"{c.vm} blocked" for c in blocked]
        print(f"Not converged: {', '.join(parts)}.", file=sys.stderr)
    return EXIT_ERROR


def _print_backend_warnings(session: Session, as_json: bool) -> None:
    """Warnings backends collected while applying (e.g. a PVE task's WARNINGS: n)."""
    if as_json:
        return
    for name, backend in session.backends.items():
        for warning in getattr(backend, "warnings", ()) or ():
            print(f"Warning: backend {name}: {warning}", file=sys.stderr)


def _confirm(destroy: bool) -> bool:
    what = "destroy all managed VMs" if destroy else "perform these actions"
    print(f"\nDo you want to {what}? Only 'yes' will be accepted.")
    try:
        return input("  Enter a value: ").strip() == "yes"
    except EOFError:
        return False


def report_result(plan: Plan, result: ApplyResult, seconds: float, as_json: bool) -> None:
    add, chg, destroy = plan.counts()
    if as_json:
        out = {
            "plan": plan_to_json(plan),
            "results": [
                {k: v for k, v in r.__dict__.items() if k != "observed"} | {"action": r.action}
                for r in result.results
            ],
            "ok": result.ok,
        }
        print(json.dumps(out, indent=2, default=str))
        return
    failures = result.failures()
    if not failures:
        print(
            f"\nApply complete! Resources: {add} added, {chg} changed, {destroy} destroyed "
            f"({seconds:.1f}s)."
        )
        return
    print(f"\nApply finished with {len(failures)} failed VM(s):")
    for f in failures:
        print(f"  {f.vm} ({f.backend}) [{f.layer}]: {continued(f.error)}")
