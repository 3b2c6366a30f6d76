"""``sand sync``: apply the manifest in a git repository, each new commit exactly once.

A sibling of ``apply --watch`` whose trigger is a revision instead of a save. On
every tick (``--interval``) or poke (a webhook), the branch's newest commit is
fetched (``gitmirror``). A revision not seen before is validated; a valid one is
applied once, by one :class:`~sand.loops.unattended.Reconciler` run, and recorded
(``sync.json`` beside the mirror): after a restart it is not applied again. A
revision whose manifest is invalid is reported once, with its located problems
(``sand.yaml@<revision>:LINE:COL``), and the last good revision stays in force.
Between commits, periodic runs of the revision in force re-observe and correct
drift only with ``selfHeal: true`` (as Argo CD's auto-sync).

Host paths the manifest names by a relative path (token files, keys) are found in
``host_dir``, never in the repository. The manifest only names secrets: a revision
that sets a source (``command:``, ``file:``, ``env:``) is refused with the place of
each, and the host maps the names in ``host_dir/secrets.yaml``
(:mod:`sand.manifest.repository`, :mod:`sand.manifest.hostsecrets`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from sand.errors import ManifestError, Problem, SandError
from sand.loops.gitmirror import GitError, GitMirror, Revision
from sand.loops.unattended import Reconciler, RunResult
from sand.loops.wakeups import PERIODIC, Wakeups
from sand.manifest import load_manifest
from sand.manifest.repository import repository_problems
from sand.state.private import write_private_file

WEBHOOK = "webhook"
START = "start"
# A forge's event about a work item (an issue labelled, a pull request opened): no new
# commit, but the generators' items may have changed, so the revision in force runs.
WORK_ITEM = "work item"


class SyncMetrics(Protocol):
    """What a sync counts (``sand.cli.metrics`` serves it to Prometheus)."""

    def run_done(self, revision: Revision, result: RunResult, seconds: float) -> None: ...

    def failed(self, layer: str) -> None: ...


class NoMetrics:
    def run_done(self, revision: Revision, result: RunResult, seconds: float) -> None:
        return None

    def failed(self, layer: str) -> None:
        return None


@dataclass
class SyncState:
    """What a sync remembers across restarts (``sync.json``, 0600)."""

    applied: str = ""  # the revision last applied (its run ran, whatever its outcome)
    applied_at: float = 0.0
    applied_ok: bool = False
    good: str = ""  # the newest revision with a valid manifest: the one in force
    rejected: str = ""  # the newest revision with an invalid one (reported once)

    @classmethod
    def load(cls, path: Path) -> SyncState:
        try:
            data = json.loads(path.read_text())
            return cls(**{k: data[k] for k in asdict(cls()) if k in data})
        except (OSError, ValueError, TypeError):
            return cls()

    def save(self, path: Path) -> None:
        write_private_file(path, json.dumps(asdict(self), indent=2).encode())


def vm_status(result: RunResult) -> dict[tuple[str, str], str]:
    """(backend, VM) -> Synced, OutOfSync or Unknown, as the run left them. A VM the
    manifest no longer names is listed until it is gone."""
    plan = result.plan
    if plan is None:
        return {}
    results = result.outcome.result.results if result.outcome and result.outcome.result else ()
    done = {(r.backend, r.vm): r.ok for r in results}
    out: dict[tuple[str, str], str] = {}
    for c in plan.changes:
        key = (c.backend, c.vm)
        if c.backend in plan.unknown_backends:
            out[key] = "Unknown"
        elif key in done:
            if done[key] and c.desired is None:
                continue  # deleted
            out[key] = "Synced" if done[key] and not c.drift else "OutOfSync"
        else:
            out[key] = "Synced" if not c.acts and not c.drift and c.desired else "OutOfSync"
    return out


@dataclass
class Syncer:
    mirror: GitMirror
    path: str  # the manifest's path in the repository
    host_dir: Path
    reconciler: Reconciler
    metrics: SyncMetrics = field(default_factory=NoMetrics)
    state: SyncState = field(init=False)

    def __post_init__(self) -> None:
        self.state = SyncState.load(self.state_file)
        self.head_rejected = False  # the last fetched revision's manifest is invalid
        self.recheck = bool(self.state.good)  # in force before this start: checked again
        # The newest revision refused before this start is checked again too: the host
        # may have changed its files since (a backend pinned in pins.yaml, a secret mapped).
        self.retry_rejected = bool(self.state.rejected)

    @property
    def state_file(self) -> Path:
        return self.mirror.dir / "sync.json"

    def manifest_file(self, sha: str) -> Path:
        return self.mirror.dir / "revisions" / sha / Path(self.path).name

    def _say(self, text: str) -> None:
        self.reconciler.report.note(text)

    async def check(self, reason: str) -> RunResult | None:
        """One tick: fetch, take in a new revision, and run what is due (None: nothing
        ran, e.g. a poke that found no new commit)."""
        if self.recheck:
            self.recheck = False
            self._recheck_good()
        previous = self.state.good
        try:
            head = await self.mirror.fetch()
        except GitError as exc:
            self.metrics.failed(exc.layer)
            self._say(f"{exc}; revision {previous[:12] or '(none yet)'} stays in force")
            head = None
        retry, self.retry_rejected = self.retry_rejected, False
        new = head is not None and head.sha not in (self.state.good, self.state.rejected)
        if head is not None and (new or (retry and head.sha == self.state.rejected)):
            await self._take_in(head)
        elif head is not None:
            await self._tidy()
        if head is not None:
            self.head_rejected = head.sha == self.state.rejected
        if not self.state.good:
            return None
        good = Revision(self.state.good, "")
        if self.state.good != self.state.applied:
            return await self._apply(good, f"revision {good.short}")
        if reason in (PERIODIC, START, WORK_ITEM):
            # Between commits (a restart, a work item's event are not commits): drift is
            # corrected only with selfHeal, as a periodic run does.
            return await self._apply(good, PERIODIC)
        return None

    async def _take_in(self, head: Revision) -> None:
        """Validate the manifest of a new revision: in force if valid, else reported."""
        file = self.manifest_file(head.sha)
        try:
            text = await self.mirror.read(head, self.path)
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private_file(file, text)
            self._validate(file)
        except ManifestError as exc:
            self._reject(head, _relabel(exc, file, f"{self.path}@{head.short}"))
            return
        except GitError as exc:
            self._reject(head, exc)
            return
        self._say(f"revision {head.short} ({head.subject}): manifest valid")
        self._forget(keep=head.sha)
        self.state.good = head.sha
        if self.state.rejected == head.sha:
            self.state.rejected = ""  # refused before, for what the host has fixed since
        self.state.save(self.state_file)

    async def _tidy(self) -> None:
        """The mirror's housekeeping, on a check that found nothing new: never in the
        way of a pushed commit (a webhook's fetch leaves it out)."""
        try:
            await self.mirror.tidy()
        except GitError as exc:
            self._say(f"{exc} (the mirror's housekeeping; the sync goes on)")

    def _validate(self, file: Path) -> None:
        """ManifestError unless the manifest at ``file`` is valid and sets no host source."""
        problems = repository_problems(load_manifest(file), self.host_dir)
        if problems:
            raise ManifestError(problems)

    def _recheck_good(self) -> None:
        """The revision in force before this start, checked again by this sand's rules:
        an older sand may have let through what this one refuses (a secret's source)."""
        sha, file = self.state.good, self.manifest_file(self.state.good)
        if not file.is_file():
            return  # nothing to check; the run says what is missing
        try:
            self._validate(file)
        except ManifestError as exc:
            self.state.good = ""
            self.retry_rejected = False  # refused just now: not twice
            self._reject(
                Revision(sha, "in force until now"),
                _relabel(exc, file, f"{self.path}@{sha[:12]}"),
            )

    def _reject(self, head: Revision, exc: SandError) -> None:
        self.metrics.failed(exc.layer)
        kept = self.state.good[:12] or "none: nothing is applied until a valid one"
        self._say(
            f"revision {head.short} ({head.subject}): the manifest is invalid; the last good "
            f"revision stays in force ({kept}):\n{exc}"
        )
        self.state.rejected = head.sha
        self.state.save(self.state_file)

    def _forget(self, keep: str) -> None:
        """Old revisions' manifest copies: only the one in force and the new are kept."""
        root = self.mirror.dir / "revisions"
        for d in root.iterdir() if root.is_dir() else ():
            if d.name not in (keep, self.state.good):
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()

    async def _apply(self, revision: Revision, reason: str) -> RunResult:
        new = revision.sha != self.state.applied
        if new:
            self._say(f"applying revision {revision.short}")
        started = time.monotonic()
        result = await self.reconciler.run(
            self.manifest_file(revision.sha), reason, host_dir=self.host_dir, revision=revision.sha
        )
        seconds = time.monotonic() - started
        if new:
            # Recorded once its run has run: a restart does not apply it again (a run
            # cut short by the restart is, as it never got here).
            self.state.applied, self.state.applied_at = revision.sha, time.time()
            self.state.applied_ok = result.ok
            self.state.save(self.state_file)
            verdict = "converged" if result.ok else "not converged: " + "; ".join(result.problems())
            self._say(f"revision {revision.short} applied ({verdict})")
        for layer in result.failed_layers():
            self.metrics.failed(layer)
        self.metrics.run_done(revision, result, seconds)
        return result

    async def run(
        self,
        interval: float,
        stop: asyncio.Event,
        poke: asyncio.Event,
        item_poke: asyncio.Event | None = None,
    ) -> None:
        """Until ``stop``: a check at start, every ``interval`` seconds, on every
        ``poke`` (a push) and ``item_poke`` (a work item's event). Single-flight: pokes
        during a check collapse into one more."""
        wakeups = Wakeups(stop, first=START)

        async def pokes(event: asyncio.Event, reason: str) -> None:
            while not stop.is_set():
                await event.wait()
                event.clear()
                wakeups.fire(reason)

        def pick(reasons: list[str]) -> str:
            # A work item's check fetches too: it covers a push's as well.
            return next((r for r in (START, WORK_ITEM, WEBHOOK) if r in reasons), PERIODIC)

        sources = [wakeups.every(interval), pokes(poke, WEBHOOK)]
        if item_poke is not None:
            sources.append(pokes(item_poke, WORK_ITEM))
        await wakeups.serve(sources, self.check, pick)


def _relabel(exc: ManifestError, copy: Path, label: str) -> ManifestError:
    """The problems as found in the revision (``sand.yaml@<rev>:LINE:COL``), not in
    sand's ``copy`` of it; a problem of a host file (``pins.yaml``) stays at its own."""
    return ManifestError(
        [
            Problem(label if p.file == str(copy) else p.file, p.line, p.column, p.message)
            for p in exc.problems
        ]
    )
