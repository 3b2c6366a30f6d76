"""The board's reach into the world: observe, plan, apply, land, and the shell's endpoint.

Each call here runs off the UI thread (a worker thread with its own event loop), so a
slow backend never holds a key press; none of it knows about the screen. It reuses
the CLI's own pieces: ``sand status``'s rows (:func:`sand.survey.status.status_from`),
``sand plan``'s plan (:func:`sand.survey.plan.compute_plan`), ``sand apply``'s
recover, mass-delete guard, approval and carry-out, ``sand land``'s sweep.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sand.apply.events import Hooks
from sand.apply.reconcile import ApplyOutcome
from sand.apply.run import ApplyRun, QuietView
from sand.cli.guests import UsageError, fork_views, land_vm, pinned_endpoint
from sand.cli.ui.model import BoardRow, Cell, board_rows, painted
from sand.errors import SandError
from sand.manifest import load_manifest
from sand.plan.model import Plan
from sand.project import open_session
from sand.state.records import load_records
from sand.survey.agentread import AgentReader
from sand.survey.guest_secrets import GuestSecrets
from sand.survey.plan import compute_plan
from sand.survey.status import StatusReport, status_from, status_plan
from sand.verbs.compare import ForkView

if TYPE_CHECKING:
    from sand.guest.endpoint import GuestEndpoint
    from sand.manifest import LoadedManifest

# (the plan, why it may not run or None) -> approved? The board asks in a dialog.
Ask = Callable[[Plan, str | None], Awaitable[bool]]


class Observes(Protocol):
    """Where observations are made (``sand.cli.ui.observer.Observer``: a child process)."""

    def observe(self) -> Snapshot: ...


@dataclass(frozen=True)
class Snapshot:
    """One observation of the fleet: the read-only plan, ``sand status``'s report of it,
    when it was taken and how long it took, and the board's rows of it (built where the
    snapshot is made, off the UI thread)."""

    plan: Plan
    report: StatusReport
    taken: float = field(default_factory=time.time)
    seconds: float = 0.0
    rows: list[BoardRow] = field(init=False, compare=False, repr=False)
    cells: dict[str, tuple[Cell, ...]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        rows = board_rows(self.report.rows, self.plan)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "cells", {r.vm: painted(r, self.taken) for r in rows})


@dataclass
class Fleet:
    manifest: Path
    # The manifest as last loaded, and the file's identity then: a refresh of an
    # unchanged file reuses it (validating a big manifest holds the GIL, and with it
    # the keys, for tens of milliseconds).
    _loaded: tuple[tuple[int, int, int], LoadedManifest] | None = field(default=None, repr=False)
    # Observe in a child process (sand ui itself); None: on the calling thread (tests).
    observer: Observes | None = None
    _primed: LoadedManifest | None = field(default=None, repr=False)
    agents: AgentReader = field(default_factory=AgentReader, repr=False)

    def loaded(self) -> LoadedManifest | None:
        """The manifest, loaded again only when the file changed (None: load it)."""
        try:
            st = self.manifest.stat()
        except OSError:
            return None  # let open_session say what is wrong with the path
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._loaded is None or self._loaded[0] != key:
            self._loaded = (key, load_manifest(self.manifest))
        return self._loaded[1]

    def observe(self) -> Snapshot:
        """The fleet now, within ``sand plan``'s budget: one listing per backend, no
        guest contacted, nothing changed."""
        if self.observer is None:
            return asyncio.run(self.observe_async())
        self.prime_redaction()
        return self.observer.observe()

    def prime_redaction(self) -> None:
        """Resolve here, once per manifest, the secret values an observation resolves (a
        child process's resolving registers them there only): what this process reads
        and shows itself (journal, provisioning log) is redacted with them too."""
        loaded = self.loaded()
        if loaded is None or loaded is self._primed:
            return

        session = open_session(self.manifest, lock=False, loaded=loaded)
        try:
            GuestSecrets(session).stamps(session.desired)
        except SandError:
            pass  # the observation reports what could not be resolved
        finally:
            asyncio.run(session.close())
        self._primed = loaded

    async def observe_async(self) -> Snapshot:
        started = time.monotonic()
        session = open_session(self.manifest, lock=False, loaded=self.loaded())
        try:
            plan = await status_plan(session)
            # The agents' state: one guest exchange per running VM with agents, from
            # this refresh's listing and the endpoints the reader remembers.
            agents = await self.agents.read(plan, session.backends)
        finally:
            await session.close()
        report = status_from(plan, load_records(session.project))
        for row in report.rows:
            if row.vm in agents:
                row.agents = agents[row.vm]
        return Snapshot(plan, report, seconds=time.monotonic() - started)

    def plan(self) -> Plan:
        """What ``sand plan`` shows: preflighted, swept for unpushed work, read-only."""
        return asyncio.run(self.plan_async())

    async def plan_async(self) -> Plan:
        session = open_session(self.manifest, lock=False)
        try:
            return await compute_plan(session)
        finally:
            await session.close()

    async def apply(
        self, ask: Ask, hooks: Hooks, note: Callable[[str], None]
    ) -> ApplyOutcome | None:
        """``sand apply`` without its flags: the journal settled, the plan shown and
        approved with ``yes`` (``ask``), the mass-delete and unpushed-work guards in
        force (the board has no --allow-mass-delete or --allow-data-loss), the engine's
        events to ``hooks``. None: nothing ran (not approved, or refused)."""
        session = open_session(self.manifest, lock=True)
        try:
            # One writer per project, as `sand apply`: the lease is taken before the
            # first change (a journal replay, or the approved plan), never to look.
            view = _BoardView(note, hooks)
            end = await ApplyRun(session, _Dialog(ask), view, command="ui").run()
        finally:
            await session.close()
        if end.refusal is not None:
            note(str(end.refusal))
        return end.outcome

    def land(self, vm: str) -> str:
        """What ``sand land VM`` prints: the guest's checkouts, swept read-only."""
        out = io.StringIO()

        def note(line: str) -> None:  # a wake, told where the board shows land's words
            print(line, file=out)

        try:
            asyncio.run(land_vm(str(self.manifest), vm, out=out, note=note))
        except SandError as exc:
            return out.getvalue() + f"Error: {exc}\n"
        return out.getvalue()

    def compare(self, forks: Sequence[str]) -> list[ForkView]:
        """What ``sand land --compare`` shows of ``forks``: each guest read once,
        read-only; a fork no entry declares (``sand fork --apply``'s, not added yet) has
        no declared checkouts to read, and its view says so."""
        wanted = set(forks)
        try:
            views = asyncio.run(fork_views(self.manifest, wanted.__contains__, ", ".join(forks)))
        except UsageError:  # none of them is declared
            views = []
        read = {v.vm for v in views}
        undeclared = "no entry of the manifest declares it: its checkouts are not known"
        return views + [ForkView(vm, problem=undeclared) for vm in forks if vm not in read]

    def endpoint(self, vm: str, note: Callable[[str], None] | None = None) -> GuestEndpoint:
        """The guest endpoint ``sand shell VM`` hands to ssh (its host key pinned); a VM
        asleep is woken first, ``note`` told so."""
        return asyncio.run(pinned_endpoint(str(self.manifest), vm, note))


@dataclass(frozen=True)
class _Dialog:
    """The board's approval: the plan in a dialog, ``yes`` typed into it."""

    ask: Ask
    person: bool = True

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        return await self.ask(plan, problem) and problem is None


class _BoardView(QuietView):
    """What settling the journal did goes to the status line."""

    def __init__(self, note: Callable[[str], None], hooks: Hooks) -> None:
        super().__init__(hooks)
        self.note = note

    def recovered(self, lines: Collection[str]) -> None:
        for line in lines:
            self.note(f"Recovered: {line}")
