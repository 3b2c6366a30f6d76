"""A writer of the audit log SIGKILLed in the middle of a record: the log still verifies, and
the torn record is reported, then owned up to by the next writer, never silently dropped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sand.audit.log import LOG_FILE
from sand.audit.trail import record
from tests.audit.helpers import verify_host

ROOT = Path(__file__).resolve().parents[2]
BIG = 48 << 20  # a record this large is written over many pages: a kill lands inside it


def kill_mid_record(state: Path) -> int:
    """Run a writer of large records; SIGKILL it while the file ends inside a record.
    The committed size before the torn one."""
    env = {**os.environ, "SAND_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    log = state / "audit" / LOG_FILE
    for _attempt in range(20):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.audit.writer", "0", str(BIG), "big"], env=env, cwd=ROOT
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with log.open("rb") as fh:
                        size = fh.seek(0, 2)
                        fh.seek(max(0, size - 1))
                        ends_inside = size > 0 and fh.read(1) != b"\n"
                except FileNotFoundError:
                    continue
                if ends_inside:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    data = log.read_bytes()
                    if not data.endswith(b"\n"):  # the kill landed inside a record
                        return data.rfind(b"\n") + 1
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    raise AssertionError("no kill landed inside a record in 20 attempts")


def test_a_record_torn_by_sigkill_is_reported_then_owned_up_to(tmp_path: Path, monkeypatch) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("SAND_STATE_DIR", str(state))
    record("test.before", n=1)
    committed = kill_mid_record(state)
    home = state / "audit"
    torn_size = (home / LOG_FILE).stat().st_size - committed

    report = verify_host(home)
    assert report.ok, report.problem
    assert len(report.torn) == 1
    torn = report.torn[0]
    assert (torn.offset, torn.length, torn.acknowledged) == (committed, torn_size, False)

    record("test.after", n=2)  # the next writer finds the fragment and names it
    report = verify_host(home)
    assert report.ok, report.problem
    assert [(t.offset, t.length, t.acknowledged) for t in report.torn] == [
        (committed, torn_size, True)
    ]
    tail = (home / LOG_FILE).read_bytes()[committed + torn_size :].splitlines()
    assert tail[0] == b""  # the fragment's line was ended, not glued to the next record
    assert b'"kind":"audit.torn"' in tail[1] and f'"fragment_bytes":{torn_size}'.encode() in tail[1]
    assert b'"kind":"test.after"' in tail[2]


def test_small_writers_killed_at_random_leave_a_log_that_verifies(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "SAND_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    log = state / "audit" / LOG_FILE
    for round_ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.audit.writer", "0", "200", f"r{round_}"],
            env=env,
            cwd=ROOT,
        )
        start = log.stat().st_size if log.exists() else 0
        deadline = time.monotonic() + 60
        while (
            not log.exists() or log.stat().st_size < start + 20_000
        ) and time.monotonic() < deadline:
            time.sleep(0.005)  # polling the file's growth, the condition of the kill
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        report = verify_host(state / "audit")
        assert report.ok, report.problem
