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

Each run is one :class:`sand.loops.unattended.Reconciler` run (``sand sync`` makes
the same ones): it takes the project's leases before it changes anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from sand.apply.events import Hooks, NoHooks
from sand.errors import ManifestError
from sand.loops.notify import Announcer
from sand.loops.unattended import Backoff, Reconciler, RunReport, Silent
from sand.loops.wakeups import Wakeups
from sand.manifest import load_manifest
from sand.manifest.hostsecrets import host_secrets_file, load_host_secrets
from sand.survey.agentread import AgentReader

SAVED = "manifest saved"

# The report a watch prints to (kept under its old name).
WatchReport = RunReport
__all__ = ["Backoff", "Silent", "WatchReport", "Watcher"]


@dataclass
class Watcher:
    manifest: Path
    interval: float
    debounce: float
    parallelism: int
    allow_mass_delete: bool
    report: RunReport = field(default_factory=Silent)
    hooks: Hooks = field(default_factory=NoHooks)  # each run's progress events
    backoff: Backoff = field(default_factory=Backoff)
    runs: int = 0
    last_good: str | None = None
    # The agents' state, read after each run when the manifest has notify: (kept across
    # runs: the endpoints it knows, the transitions already told).
    agents: AgentReader = field(default_factory=AgentReader)
    announce: Announcer | None = None

    def referenced_files(self) -> set[Path]:
        """The manifest, the host's secrets.yaml beside it and the secret files either
        names: saving any re-applies."""
        here = self.manifest.parent
        files = {self.manifest.resolve(), host_secrets_file(here).resolve()}
        try:
            secrets = load_manifest(self.manifest).manifest.secrets.values()
            sources = [*load_host_secrets(here).values(), *(s.source for s in secrets)]
        except ManifestError:
            return files
        for source in sources:
            if source and source.file:
                p = Path(source.file).expanduser()
                files.add((p if p.is_absolute() else here / p).resolve())
        return files

    async def reconcile(self, reason: str, *, targets: Collection[str] = ()) -> None:
        """One run: plan (only ``targets`` when given, as ``--target``) and apply."""
        self.runs += 1
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
        reconciler = Reconciler(
            parallelism=self.parallelism,
            allow_mass_delete=self.allow_mass_delete,
            command="watch",
            report=self.report,
            hooks=self.hooks,
            backoff=self.backoff,
            agents=self.agents,
            announce=self.announce,
        )
        await reconciler.run(self.manifest, reason, targets=targets)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        # here, not at the top: importing it loads watchfiles
        from watchfiles import awatch

        stop = stop or asyncio.Event()
        wakeups = Wakeups(stop, first="start")

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
                        wakeups.fire(SAVED)
                    if self.referenced_files() != files:
                        break  # the set of watched files changed: re-arm

        def pick(reasons: list[str]) -> str:
            return SAVED if SAVED in reasons else reasons[-1]

        await wakeups.serve(
            [watch_files(), wakeups.every(self.interval)],
            self.reconcile,
            pick,
        )
