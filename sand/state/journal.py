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

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sand.state.private import open_private, write_private_file


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


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()

    def begin(
        self, op: str, *, backend: str, vm: str, identity: str, **details: Any
    ) -> JournalEntry:
        entry = JournalEntry(uuid.uuid4().hex, op, backend, vm, identity, dict(details))
        self._append({"phase": "intent", "ts": time.time(), **entry.as_dict()})
        return entry

    def step(self, entry: JournalEntry, step: str, **details: Any) -> None:
        """Record progress inside an operation (e.g. 'cloned'), for recovery and tests."""
        self._append({"phase": "step", "id": entry.id, "step": step, "ts": time.time(), **details})

    def finish(self, entry: JournalEntry, outcome: str = "done") -> None:
        self._append({"phase": outcome, "id": entry.id, "ts": time.time()})

    def settle(self, entry_id: str, how: str) -> None:
        """Close an entry left open by a crashed run (only the journal replay does this)."""
        self._append({"phase": "settled", "id": entry_id, "how": how, "ts": time.time()})

    def task(self, entry: JournalEntry, upid: str) -> None:
        """Record a backend task the operation started (a PVE UPID): a crashed run's task
        goes on without it, and recovery waits for it before settling the entry."""
        self.step(entry, "task", upid=upid)

    def pending(self) -> list[dict[str, Any]]:
        """Unfinished intents, oldest first, each with the steps reached and the tasks
        (``tasks``: UPIDs) it started."""
        open_entries: dict[str, dict[str, Any]] = {}
        for record in self._records():
            phase = record.get("phase")
            if phase == "intent":
                open_entries[record["id"]] = dict(record, steps=[], tasks=[])
            elif phase == "step" and record.get("id") in open_entries:
                entry = open_entries[record["id"]]
                if record.get("step") == "task":
                    entry["tasks"].append(str(record.get("upid") or ""))
                else:
                    entry["steps"].append(record.get("step"))
            elif record.get("id") in open_entries:
                del open_entries[record["id"]]
        return list(open_entries.values())

    def compact(self) -> None:
        """Rewrite the file keeping only open entries (called when nothing is in flight)."""
        with self._mutex:
            open_ids = {p["id"] for p in self.pending()}
            keep = [r for r in self._records() if r.get("id") in open_ids]
            # 0600 like every append, whatever the umask (a plain open() made it 0644).
            text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in keep)
            write_private_file(self.path, text.encode())

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

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._mutex:
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
