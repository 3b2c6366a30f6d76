"""``sand apply --watch``: the console around ``sand.apply.watch.Watcher``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

from sand.apply.reconcile import ApplyOutcome
from sand.plan import Plan
from sand.plan.render import render_text
from sand.terminal import continued


class ConsoleReport:
    """Watch notes on stderr, timestamped; each run's plan on stdout."""

    def note(self, text: str) -> None:
        print(f"{_now()} watch: {continued(text)}", file=sys.stderr, flush=True)

    def show_plan(self, plan: Plan) -> None:
        sys.stdout.write(render_text(plan))
        sys.stdout.flush()

    def show_outcome(self, outcome: ApplyOutcome) -> None:
        from sand.cli.outcome import report_outcome

        report_outcome(outcome, as_json=False)
        sys.stdout.flush()


def watch(args: argparse.Namespace) -> int:
    from sand.apply.watch import Watcher
    from sand.manifest import load_manifest

    watcher = Watcher(
        manifest=Path(args.manifest),
        interval=args.interval,
        debounce=args.debounce,
        parallelism=args.parallelism,
        allow_mass_delete=args.allow_mass_delete,
        report=ConsoleReport(),
    )
    load_manifest(watcher.manifest)  # a bad manifest at start is an error, exit 1
    print(f"{_now()} watching {args.manifest} (Ctrl-C to stop)", file=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(watcher.run())
    return 0


def _now() -> str:
    return time.strftime("%H:%M:%S")
