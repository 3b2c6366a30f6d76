"""`sand apply --watch`: reconcile on every manifest save, and periodically.

- Debounced: an editor's save burst (write, rename, chmod within a few hundred
  ms) gives exactly one run.
- Single-flight: never two applies at once; changes that arrive during a run
  cause exactly one follow-up run, however many there were.
- Periodic re-observation (default 60 s) detects drift; it is corrected only
  with ``selfHeal: true`` in the manifest, otherwise reported.
- An invalid edit is reported and the last good manifest stays in force.
- A VM that keeps failing is retried with exponential backoff (1 s doubling,
  5 min cap) instead of on every tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from sand.apply.events import Hooks, NoHooks
from sand.apply.reconcile import ApplyOutcome, carry_out, mass_delete_problem, recover_and_plan
from sand.errors import ManifestError, SandError
from sand.logs import get_logger
from sand.manifest import load_manifest
from sand.plan.model import Action, GuestAction, Plan
from sand.project import open_session

BACKOFF_START, BACKOFF_CAP = 1.0, 300.0


class WatchReport(Protocol):
    """Where a watch tells what it does; ``sand.cli.watch`` prints it."""

    def note(self, text: str) -> None:
        """A line about the watch itself (a run starts, a refusal, a failure)."""

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


@dataclass
class Watcher:
    manifest: Path
    interval: float
    debounce: float
    parallelism: int
    allow_mass_delete: bool
    report: WatchReport = field(default_factory=Silent)
    hooks: Hooks = field(default_factory=NoHooks)  # each run's progress events
    backoff: Backoff = field(default_factory=Backoff)
    runs: int = 0
    last_good: str | None = None

    def referenced_files(self) -> set[Path]:
        """The manifest and the secret files it names: saving either re-applies."""
        files = {self.manifest.resolve()}
        try:
            m = load_manifest(self.manifest).manifest
        except ManifestError:
            return files
        for secret in m.secrets.values():
            if secret.source.file:
                p = Path(secret.source.file).expanduser()
                files.add((p if p.is_absolute() else self.manifest.parent / p).resolve())
        return files

    async def reconcile(self, reason: str, *, targets: Collection[str] = ()) -> None:
        """One run: plan (only ``targets`` when given, as ``--target``) and apply."""
        self.runs += 1
        log = get_logger()
        say = self.report.note
        say(f"run {self.runs} ({reason})")
        try:
            text = self.manifest.read_text(encoding="utf-8")
            load_manifest(self.manifest)
            self.last_good = text
        except (ManifestError, OSError) as exc:
            # Keep the last good manifest in force: nothing is applied from a bad edit.
            say(f"manifest invalid, keeping the last good one:\n{exc}")
            return
        try:
            session = open_session(self.manifest, lock=True, lock_wait=30.0)
        except SandError as exc:
            say(str(exc))
            return
        try:
            periodic = reason == "periodic"
            heal = session.loaded.manifest.self_heal
            prepared = await recover_and_plan(
                session, correct_drift=heal or not periodic, targets=targets
            )
            for line in prepared.recovered:
                say(f"Recovered: {line}")
            prepared = replace(prepared, plan=self._without_backed_off(prepared.plan))
            plan = prepared.plan
            self.report.show_plan(plan)
            problem = mass_delete_problem(plan)
            if problem and not self.allow_mass_delete:
                say(f"refused: {problem}")
                return
            if not plan.has_changes:
                return
            outcome = await carry_out(
                session, prepared, parallelism=self.parallelism, hooks=self.hooks
            )
            self.report.show_outcome(outcome)
            now = time.monotonic()
            for r in outcome.result.results if outcome.result else ():
                if r.ok:
                    self.backoff.succeeded(r.vm)
                else:
                    self.backoff.failed(r.vm, now)
                    say(f"{r.vm} failed [{r.layer}]: {r.error}")
        except SandError as exc:
            log.error("watch run failed", error=str(exc))
            say(str(exc))
        finally:
            await session.close()

    def _without_backed_off(self, plan: Plan) -> Plan:
        now = time.monotonic()
        kept = tuple(
            replace(c, action=Action.NOOP, guest=GuestAction.NONE)
            if self.backoff.waiting(c.vm, now)
            else c
            for c in plan.changes
        )
        return replace(plan, changes=kept)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        from watchfiles import awatch

        stop = stop or asyncio.Event()
        wake = asyncio.Event()
        reasons: list[str] = ["start"]
        wake.set()

        async def watch_files() -> None:
            while not stop.is_set():
                files = self.referenced_files()
                dirs = sorted({str(f.parent) for f in files})

                def ours(_change: object, path: str, files: set[Path] = files) -> bool:
                    return Path(path).resolve() in files

                # watchfiles yields once no change arrived for ``step`` ms (capped
                # at ``debounce`` ms): our debounce is that quiet window, so an
                # editor's write + rename + touch lands as one batch.
                quiet = max(50, int(self.debounce * 1000))
                async for changes in awatch(
                    *dirs,
                    debounce=max(4 * quiet, 1600),
                    step=quiet,
                    stop_event=stop,
                    watch_filter=ours,
                    recursive=False,
                ):
                    if changes:
                        reasons.append("manifest saved")
                        wake.set()
                    if self.referenced_files() != files:
                        break  # the set of watched files changed: re-arm

        async def tick() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.interval)
                if not stop.is_set():
                    reasons.append("periodic")
                    wake.set()

        async def loop() -> None:
            # One consumer: runs never overlap, and any number of wake-ups that
            # arrive during a run collapse into exactly one follow-up.
            while not stop.is_set():
                await wake.wait()
                if stop.is_set():
                    break
                wake.clear()
                reason = "manifest saved" if "manifest saved" in reasons else reasons[-1]
                reasons.clear()
                await self.reconcile(reason)

        tasks = [asyncio.create_task(t()) for t in (watch_files, tick, loop)]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        wake.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stopper.cancel()
