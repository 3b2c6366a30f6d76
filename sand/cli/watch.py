"""``sand apply --watch``: the console around ``sand.loops.watch.Watcher``; its timestamped
notes are ``sand sync``'s too."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from sand.apply.reconcile import ApplyOutcome
from sand.cli.desktop import tell_desktop, terminal_bell
from sand.cli.inflight import track
from sand.cli.outcome import report_outcome
from sand.cli.progress import progress_view
from sand.loops.notify import Announcer
from sand.loops.watch import Watcher
from sand.manifest import load_manifest
from sand.plan import Plan
from sand.plan.render import render_text
from sand.terminal import continued


class ConsoleReport:
    """Notes on stderr, timestamped (``watch:``, ``sync:``); each run's plan on stdout."""

    def __init__(self, who: str = "watch") -> None:
        self.who = who

    def note(self, text: str) -> None:
        print(f"{now_stamp()} {self.who}: {continued(text)}", file=sys.stderr, flush=True)

    def show_plan(self, plan: Plan) -> None:
        sys.stdout.write(render_text(plan))
        sys.stdout.flush()

    def show_outcome(self, outcome: ApplyOutcome) -> None:

        report_outcome(outcome, as_json=False)
        sys.stdout.flush()


def watch(args: argparse.Namespace) -> int:
    """Until Ctrl-C: 0 when it came between runs; during a run the interrupt reaches
    ``sand.cli.main``, which names what was left in progress and exits 130."""
    load_manifest(Path(args.manifest))  # a bad manifest at start is an error, exit 1
    print(f"{now_stamp()} watching {args.manifest} (Ctrl-C to stop)", file=sys.stderr)
    # Plain lines, not a live view: a watch's runs interleave with its notes.
    with progress_view("log" if args.log_format == "json" else "lines") as view:
        inflight = track(view)
        announce = Announcer(
            say=ConsoleReport().note, desktop=lambda t: tell_desktop(t, terminal_bell)
        )
        watcher = Watcher(
            manifest=Path(args.manifest),
            interval=args.interval,
            debounce=args.debounce,
            parallelism=args.parallelism,
            allow_mass_delete=args.allow_mass_delete,
            report=ConsoleReport(),
            hooks=inflight,
            announce=announce,
        )
        try:
            asyncio.run(watcher.run())
        except KeyboardInterrupt:
            if inflight.phases:
                raise
            print(f"{now_stamp()} watch: stopped", file=sys.stderr)
        finally:
            announce.close()  # what is queued for the webhook gets a moment to go
    return 0


def now_stamp() -> str:
    """The time of day a note is stamped with."""
    return time.strftime("%H:%M:%S")
