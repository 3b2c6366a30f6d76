"""Host state: journal survives a crash mid-write; the lock dies with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sand.errors import StateError
from sand.state.journal import Journal
from sand.state.lock import ProjectLock


def test_journal_reports_unfinished_intents_with_their_steps(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    done = journal.begin("create", backend="pve", vm="a", identity="101")
    journal.finish(done)
    open_one = journal.begin("create", backend="pve", vm="b", identity="102", node="pve1")
    journal.step(open_one, "cloned")
    pending = journal.pending()
    assert [(p.vm, p.identity, p.steps, p.detail("node")) for p in pending] == [
        ("b", "102", ("cloned",), "pve1")
    ]
    journal.settle(open_one.id, "adopted")
    assert journal.pending() == []


def test_journal_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.begin("delete", backend="laptop", vm="c", identity="c")
    with open(path, "a") as fh:
        fh.write('{"phase": "intent", "id": "tor')  # crash mid-write
    assert [p.vm for p in journal.pending()] == ["c"]


def test_journal_file_is_private(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    journal.begin("create", backend="pve", vm="a", identity="1")
    assert (tmp_path / "j.jsonl").stat().st_mode & 0o077 == 0


def test_compact_keeps_only_open_entries(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    for i in range(5):
        journal.finish(journal.begin("create", backend="pve", vm=f"v{i}", identity=str(i)))
    keep = journal.begin("create", backend="pve", vm="open", identity="9")
    journal.compact()
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert len(lines) == 1 and keep.id in lines[0]


HOLDER = """
import sys, time
from pathlib import Path
from sand.state.lock import ProjectLock
lock = ProjectLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_lock_refuses_a_second_holder_and_frees_itself_when_the_holder_is_killed(tmp_path):
    path = tmp_path / "apply.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StateError) as info:
            ProjectLock(path).acquire()
        assert f"pid {holder.pid}" in str(info.value)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        lock = ProjectLock(path)
        lock.acquire(wait=5)  # no manual unlock needed after kill -9
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()


def test_lock_wait_gives_up_after_the_deadline(tmp_path):
    path = tmp_path / "apply.lock"
    first = ProjectLock(path)
    first.acquire()
    try:
        started = time.monotonic()
        with pytest.raises(StateError):
            ProjectLock(path).acquire(wait=0.3)
        assert time.monotonic() - started >= 0.3
    finally:
        first.release()


def test_credential_files_must_be_private(tmp_path):
    from sand.state.private import private_file_problem

    token = tmp_path / "token"
    assert private_file_problem(token) == "does not exist"
    token.write_text("x")
    token.chmod(0o640)
    assert f"chmod 600 {token}" in (private_file_problem(token) or "")
    token.chmod(0o600)
    assert private_file_problem(token) is None
    assert private_file_problem(tmp_path) == "is not a regular file"


def test_an_operation_is_closed_or_left_open_by_its_rule(tmp_path):
    """The one bracket: done on success, failed on an error that left nothing behind,
    open (for recovery) on an error after which what landed is unknown, and on a crash."""
    from sand.errors import BackendError
    from sand.state.journal import never

    journal = Journal(tmp_path / "j.jsonl")
    with journal.operation("update", backend="b", vm="ok", identity="1") as entry:
        journal.step(entry, "configured")
    for vm, rule in (("refused", None), ("unknown", never)):
        kw = {} if rule is None else {"failed_when": rule}
        try:
            with journal.operation("update", backend="b", vm=vm, identity="2", **kw):
                raise BackendError("boom")
        except BackendError:
            pass
    try:
        with journal.operation("update", backend="b", vm="crashed", identity="3"):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert sorted(p.vm for p in journal.pending()) == ["crashed", "unknown"]
