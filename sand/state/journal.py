"""Write-ahead journal of mutating actions.

Every mutating backend call is preceded by an ``intent`` record, fsync'ed,
naming the backend, the VM, the identity sand chose (vmid / instance name) and
the operation; entries that act on an existing VM also record its incarnation,
and ``task`` steps the backend tasks started (PVE UPIDs). ``finish`` closes an
entry. After a crash the next apply asks the backend to decide each unfinished
one (adopt a half-made VM carrying our marker, remove it, or nothing when the VM
at that id is another incarnation), acts, and only then settles it (``settle``,
called by the replay alone), so a kill at any step leaves neither a duplicate
nor an orphan. Entries hold ids, never secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand.errors import SandError
from sand.state.paths import project_dir
from sand.state.private import open_private, write_private_file


def journal_path(project: str) -> Path:
    """The project's journal file, in its state dir."""
    return project_dir(project) / "journal.jsonl"


@dataclass(frozen=True)
class JournalEntry:
    id: str
    op: str
    backend: str
    vm: str
    identity: str
    details: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "op": self.op,
            "backend": self.backend,
            "vm": self.vm,
            "identity": self.identity,
            **self.details,
        }


# Fields every intent record has; anything else an operation recorded is in ``details``.
_CORE = ("id", "op", "backend", "vm", "identity")


@dataclass(frozen=True)
class PendingEntry:
    """An operation a run began and never closed: what recovery decides about."""

    id: str
    op: str
    backend: str
    vm: str
    identity: str
    steps: tuple[str, ...] = ()  # the steps it reached, in order
    tasks: tuple[str, ...] = ()  # backend tasks it started (PVE UPIDs)
    details: Mapping[str, Any] = field(default_factory=dict)  # what else it recorded

    def detail(self, key: str, default: Any = None) -> Any:
        return self.details.get(key, default)

    @classmethod
    def of(cls, record: Mapping[str, Any], steps: list[str], tasks: list[str]) -> PendingEntry:
        return cls(
            id=str(record.get("id") or ""),
            op=str(record.get("op") or ""),
            backend=str(record.get("backend") or ""),
            vm=str(record.get("vm") or ""),
            identity=str(record.get("identity") or ""),
            steps=tuple(steps),
            tasks=tuple(tasks),
            details={k: v for k, v in record.items() if k not in (*_CORE, "phase", "ts")},
        )


def always(_: BaseException) -> bool:
    """An error closes the entry as failed: the call was refused, nothing landed."""
    return True


def never(_: BaseException) -> bool:
    """An error leaves the entry open: tasks it started may still run or have landed,
    so the next run's recovery looks (and waits for them) before it is settled."""
    return False


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        # Group commit for intents begun by coroutines (``begin_async``): records written
        # so far, records an fsync has made durable, and the fsync under way (its loop).
        self._written = 0
        self._durable = 0
        self._syncing: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._syncer: ThreadPoolExecutor | None = None
        # The file held open from the first record to ``close``: a cold apply of 200 VMs
        # wrote ~2,000 records, each an open, fstat and close of its own.
        self._held: int | None = None

    def begin(
        self, op: str, *, backend: str, vm: str, identity: str, **details: Any
    ) -> JournalEntry:
        entry = JournalEntry(uuid.uuid4().hex, op, backend, vm, identity, dict(details))
        self._append({"phase": "intent", "ts": time.time(), **entry.as_dict()}, durable=True)
        return entry

    async def begin_async(
        self, op: str, *, backend: str, vm: str, identity: str, **details: Any
    ) -> JournalEntry:
        """``begin`` for a coroutine: it returns, as ``begin`` does, once the intent is
        fsync'd, but the fsync runs in the journal's own thread, not on the event loop,
        and one fsync serves every intent written while it waited (a cold apply of 200
        VMs began 200 intents, each an fsync that stopped every other VM's work)."""
        entry = JournalEntry(uuid.uuid4().hex, op, backend, vm, identity, dict(details))
        written = self._append({"phase": "intent", "ts": time.time(), **entry.as_dict()})
        await self._synced(written)
        return entry

    async def _synced(self, written: int) -> None:
        """Wait until the first ``written`` records are durable, starting an fsync when
        none is under way (one under way may have begun before they were written)."""
        loop = asyncio.get_running_loop()
        while self._durable < written:
            syncing = self._syncing
            # Only an fsync still running is waited for: awaiting one that has ended
            # (its starter not yet resumed to count it) returns without yielding, and
            # this loop would spin with the event loop held.
            if syncing is not None and syncing[0] is loop and not syncing[1].done():
                with contextlib.suppress(Exception):  # its starter raises it
                    await asyncio.shield(syncing[1])
                continue
            if self._syncer is None:
                self._syncer = ThreadPoolExecutor(1, thread_name_prefix="sand-journal")
            upto = self._written  # every record written before the fsync starts
            future = loop.run_in_executor(self._syncer, self._fsync)
            self._syncing = (loop, future)
            try:
                await future
            finally:
                if self._syncing is not None and self._syncing[1] is future:
                    self._syncing = None
            self._durable = max(self._durable, upto)

    def _fsync(self) -> None:
        # A descriptor of its own (a dup, not another open): ``close`` or a compaction may
        # close the held one while this thread syncs.
        with self._mutex:
            fd = os.dup(self._descriptor())
        try:
            os.fsync(fd)  # the file's data, whichever descriptor wrote it
        finally:
            os.close(fd)

    def _descriptor(self) -> int:
        """The journal file's descriptor, opened at the first record and kept; opened
        again once the file it holds has no name left (another process compacted the
        journal, renaming a new file over it: what follows must go into the new file).
        An fstat of the descriptor tells, cheaper than a stat of the path. Call with the
        mutex held."""
        if self._held is not None:
            if os.fstat(self._held).st_nlink > 0:
                return self._held
            self._release()
        self._held = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        return self._held

    def _release(self) -> None:
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def close(self) -> None:
        """Close the file (a later record opens it again): at the end of a run."""
        with self._mutex:
            self._release()

    def step(self, entry: JournalEntry, step: str, **details: Any) -> None:
        """Record progress inside an operation (e.g. 'cloned'), for recovery and tests."""
        self._append({"phase": "step", "id": entry.id, "step": step, "ts": time.time(), **details})

    @contextlib.contextmanager
    def operation(
        self,
        op: str,
        *,
        backend: str,
        vm: str,
        identity: str,
        failed_when: Callable[[BaseException], bool] = always,
        **details: Any,
    ) -> Iterator[JournalEntry]:
        """The one bracket around a mutating operation: intent before its first call,
        "done" after, "failed" when a call reported an error that ``failed_when`` says
        left nothing behind. Anything else — a crash, a cancellation, an error after
        which the backend cannot tell what landed (a request whose answer was lost) —
        leaves the entry open for the next run's recovery to decide."""
        entry = self.begin(op, backend=backend, vm=vm, identity=identity, **details)
        try:
            yield entry
        except SandError as exc:
            if failed_when(exc):
                self.finish(entry, "failed")
            raise
        self.finish(entry)

    def finish(self, entry: JournalEntry, outcome: str = "done") -> None:
        self._append({"phase": outcome, "id": entry.id, "ts": time.time()})

    def settle(self, entry_id: str, how: str) -> None:
        """Close an entry left open by a crashed run (only the journal replay does this)."""
        self._append(
            {"phase": "settled", "id": entry_id, "how": how, "ts": time.time()}, durable=True
        )

    def task(self, entry: JournalEntry, upid: str) -> None:
        """Record a backend task the operation started (a PVE UPID): a crashed run's task
        goes on without it, and recovery waits for it before settling the entry."""
        self.step(entry, "task", upid=upid)

    def pending(self) -> list[PendingEntry]:
        """Unfinished intents, oldest first, each with the steps reached and the tasks
        (UPIDs) it started. One pass over the file."""
        open_entries: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {}
        for record in self._records():
            phase = record.get("phase")
            key = record.get("id")
            if phase == "intent":
                open_entries[str(key)] = (record, [], [])
            elif phase == "step" and key in open_entries:
                _, steps, tasks = open_entries[key]
                if record.get("step") == "task":
                    tasks.append(str(record.get("upid") or ""))
                else:
                    steps.append(str(record.get("step")))
            elif key in open_entries:
                del open_entries[key]
        return [PendingEntry.of(r, s, t) for r, s, t in open_entries.values()]

    def entries_for(self, vm: str, limit: int = 8) -> list[dict[str, Any]]:
        """The records of the last ``limit`` operations on ``vm`` still in the file,
        each whole (its intent with its outcome), oldest first, for a person to read
        (``sand ui``). An apply's compaction keeps only open entries; a verb's own
        operation (``sand sleep``'s power) stays, closed, until then."""
        ids: dict[str, None] = {}  # in the order begun
        found: list[dict[str, Any]] = []
        for record in self._records():
            key = str(record.get("id"))
            if record.get("phase") == "intent" and record.get("vm") == vm:
                ids[key] = None
            if key in ids:
                found.append(record)
        last = set(list(ids)[-limit:])
        return [r for r in found if str(r.get("id")) in last]

    def compact(self) -> None:
        """Rewrite the file keeping only open entries (called when nothing is in flight)."""
        with self._mutex:
            open_ids = {p.id for p in self.pending()}
            keep = [r for r in self._records() if r.get("id") in open_ids]
            # 0600 like every append, whatever the umask (a plain open() made it 0644).
            text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in keep)
            write_private_file(self.path, text.encode())
            self._release()  # it holds the file the new one replaced

    def _records(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a torn last line from a crash mid-write
                    if isinstance(record, dict):
                        yield record
        except FileNotFoundError:
            return

    def _append(self, record: dict[str, Any], *, durable: bool = False) -> int:
        """Append one record. Every record is written before this returns, so a killed
        process loses none (the kernel holds them). Only intents and settlements are
        also fsync'd, as the write-ahead rule needs: what follows an intent (steps,
        tasks, the outcome) records what already happened, and if a power loss takes
        the file's tail with it, the entry reads as one a kill interrupted just before
        those records, which recovery settles by asking the backend. The next fsync'd
        record makes everything before it durable too. (An fsync per record was most
        of a cold apply's main thread.) Returns how many records this journal has
        written, this one included."""
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._mutex:
            fd = self._descriptor()
            os.write(fd, line.encode())
            self._written += 1
            written = self._written
            if durable:
                os.fsync(fd)
                self._durable = written
        return written
