"""``sand ui --watch``: the board re-plans on every save of the manifest (or a secret
file it names) and re-observes every ``--interval``, with ``sand apply --watch``'s own
debounce and single-flight (:class:`sand.loops.watch.Watcher`, whose loop this reuses).

What differs is what a run does. A save re-observes and plans in full, and the board
shows the plan; nothing is applied (``a`` applies). A periodic run re-observes and
shows drift as it is found; only when the manifest says ``selfHeal: true`` does it
correct it, and then only on the drifted VMs (as ``apply --watch`` would, through its
own run: the mass-delete and unpushed-work guards hold, failures back off). An invalid
save is reported and the last good manifest stays in force.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sand.apply.reconcile import ApplyOutcome
from sand.cli.outcome import outcome_text
from sand.cli.ui.work import BoardHooks
from sand.errors import ManifestError, SandError
from sand.loops.watch import Watcher
from sand.manifest import load_manifest
from sand.plan.model import Plan

if TYPE_CHECKING:
    from sand.cli.ui.app import Board


@dataclass
class BoardReport:
    """A watch run's notes, plan and outcome, onto the board."""

    board: Any = None

    def note(self, text: str) -> None:
        self.board.jobs.post(lambda: self.board.say(f"watch: {text}"))

    def show_plan(self, plan: Plan) -> None:
        self.board.jobs.post(lambda: self.board.show_plan(plan, "plan"))

    def show_outcome(self, outcome: ApplyOutcome) -> None:

        said = outcome_text(outcome)[0].replace("\n", " ")
        self.board.jobs.post(lambda: self.board.say(f"watch (selfHeal): {said}"))


@dataclass
class BoardWatch(Watcher):
    board: Any = None
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _stop: asyncio.Event | None = field(default=None, repr=False)

    def start(self, board: Board) -> None:
        """Watch on a thread of its own until the board stops it."""
        self.board = board
        self.report = BoardReport(board)
        self.hooks = BoardHooks(board.jobs)

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            await self.run(self._stop)

        thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        thread.start()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def reconcile(self, reason: str, *, targets: Any = ()) -> None:

        self.runs += 1
        jobs = self.board.jobs
        try:
            heal = load_manifest(self.manifest).manifest.self_heal
        except ManifestError as exc:
            # The board keeps showing what the last good manifest planned.
            why = f"manifest invalid, keeping the last good one: {exc}"
            jobs.post(lambda: self.board.show_error(why))
            return
        fleet = self.board.fleet
        try:
            snapshot = await asyncio.to_thread(fleet.observe)
        except SandError as exc:
            jobs.failed(f"watch ({reason})", exc)
            return
        jobs.post(lambda: self.board.show_snapshot(snapshot))
        if reason == "periodic":
            drifted = [c.vm for c in snapshot.plan.changes if c.drift]
            if heal and drifted and not jobs.applying:
                await super().reconcile("periodic", targets=drifted)
            return
        try:
            plan = await fleet.plan_async()
        except SandError as exc:
            jobs.failed(f"watch ({reason})", exc)
            return
        add, change, destroy = plan.counts()
        said = f"{reason}: planned {add} to add, {change} to change, {destroy} to destroy"

        def show() -> None:
            self.board.show_plan(plan, "plan")
            self.board.say(f"watch: {said}")

        jobs.post(show)
