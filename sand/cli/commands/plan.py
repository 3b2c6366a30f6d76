"""``sand plan``: the plan shown (or saved), and the exit code a CI gate reads.

It reads the world through ``sand.survey`` only: a plan process never imports the
engine that carries a plan out (``sand.apply``)."""

from __future__ import annotations

import argparse
import json
import sys

from sand import asyncrun
from sand.cli.colour import use_colour
from sand.cli.exits import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from sand.plan import Action, Plan
from sand.plan.render import plan_to_json, render_text
from sand.project import open_session
from sand.survey.plan import compute_plan


def run(args: argparse.Namespace) -> int:
    session = open_session(args.manifest, lock=False, send_listings=True)

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

    plan = asyncrun.run(run())
    if args.out:
        from sand.survey.planfile import save_plan  # only when a plan is saved

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
