"""One function per subcommand; each returns the process exit code."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sand.cli.main import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from sand.errors import PlanRefused


def cmd_validate(args: argparse.Namespace) -> int:
    from sand.manifest import load_manifest

    loaded = load_manifest(args.manifest)
    m = loaded.manifest
    print(f"{args.manifest}: valid ({len(m.vms)} VMs on {len(m.backends)} backends)")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from sand.manifest.schema import schema_text

    sys.stdout.write(schema_text())
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    import asyncio

    from sand.apply.reconcile import compute_plan
    from sand.apply.session import open_session
    from sand.plan import Action
    from sand.plan.render import plan_to_json, render_text, use_colour

    session = open_session(args.manifest, lock=False)

    async def run() -> Any:
        try:
            return await compute_plan(session, refresh_only=args.refresh_only)
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
    pending = plan.has_changes or any(c.action is Action.BLOCKED for c in plan.changes)
    if args.detailed_exitcode and (pending or (args.refresh_only and plan.drifted())):
        return EXIT_CHANGES
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    if args.watch:
        from sand.apply.watch import watch

        return watch(args)
    from sand.apply.reconcile import run_apply

    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=args.parallelism,
        allow_mass_delete=args.allow_mass_delete,
        as_json=args.json,
        progress_mode="json" if args.log_format == "json" else "auto",
    )


def cmd_destroy(args: argparse.Namespace) -> int:
    from sand.apply.reconcile import run_apply

    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=10,
        allow_mass_delete=True,
        as_json=False,
        destroy=True,
    )


def cmd_status(args: argparse.Namespace) -> int:
    from sand.apply.status import status_rows
    from sand.terminal import continued, one_line

    rows = status_rows(args.manifest)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    if not rows:
        print("No VMs in the manifest and none managed.")
        return EXIT_OK
    header = ("VM", "BACKEND", "ID", "DESIRED", "OBSERVED", "SYNCED", "HEALTHY", "PROVISIONED")
    table = [header] + [
        (
            r["vm"],
            r["backend"],
            r["identity"] or "-",
            r["desired"]["state"] if r["desired"] else "absent",
            r["observed"]["power"] if r["observed"] else "absent",
            *(str(r["conditions"][c]) for c in ("Synced", "Healthy", "Provisioned")),
        )
        for r in rows
    ]
    table = [tuple(one_line(str(v)) for v in row) for row in table]  # observed values too
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    for r in rows:
        if r.get("last_error"):
            print(f"{r['vm']}: last error: {continued(r['last_error'])}")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    import asyncio

    from sand.apply.session import open_session

    session = open_session(args.manifest, lock=False)

    async def run() -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        try:
            for name, backend in session.backends.items():
                check = getattr(backend, "doctor", None)
                findings = list(await check()) if check else []
                out.append((name, findings))
        finally:
            await session.close()
        return out

    failed = False
    for name, findings in asyncio.run(run()):
        if not findings:
            print(f"{name}: ok")
        for finding in findings:
            failed = True
            print(f"{name}: {finding}")
    return EXIT_ERROR if failed else EXIT_OK


__all__ = ["PlanRefused"]
