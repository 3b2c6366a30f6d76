"""The journal's write-ahead rule at the cost of one fsync per intent: intents (and
settlements) are fsync'd before the call they announce; the records after them are
written, not fsync'd, and a killed process loses none of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sand.state.journal import Journal


def test_only_intents_and_settlements_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    journal = Journal(tmp_path / "journal.jsonl")
    entry = journal.begin("create", backend="pve", vm="a", identity="100")
    assert len(synced) == 1
    for step in ("cloned", "configured", "resized", "started"):
        journal.task(entry, f"UPID:pve1:{step}")
        journal.step(entry, step)
    journal.finish(entry)
    assert len(synced) == 1  # seven records after the intent, none fsync'd
    journal.settle("gone", "removed")
    assert len(synced) == 2


KILLED = """
import os, signal, sys
from pathlib import Path
from sand.state.journal import Journal
journal = Journal(Path(sys.argv[1]))
entry = journal.begin("create", backend="pve", vm="a", identity="100")
journal.task(entry, "UPID:pve1:clone")
journal.step(entry, "cloned")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_process_loses_no_record_written_before_the_kill(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    done = subprocess.run([sys.executable, "-c", KILLED, str(path)], check=False)
    assert done.returncode == -signal.SIGKILL
    [pending] = Journal(path).pending()
    assert pending.steps == ("cloned",) and pending.tasks == ("UPID:pve1:clone",)
