"""SIGKILL a running `sand apply` the moment its journal reaches a given record.

The journal is fsync'ed before each mutating call, so "the record exists"
means "sand is at, or just past, that step": the test kills from outside,
with no crash hook inside sand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def journal_records(path: Path) -> list[Record]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def kill_when(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    journal: Path,
    condition: Callable[[list[Record]], bool],
    *,
    delay: float = 0.0,
    timeout: float = 120.0,
) -> bool:
    """Run ``argv``; SIGKILL it ``delay`` s after ``condition`` holds. True if killed."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False  # finished before reaching the crash point
            if condition(journal_records(journal)):
                if delay:
                    time.sleep(delay)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.002)
        raise AssertionError("crash point never reached")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def sand_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "sand", *args]


def intent(op: str) -> Callable[[list[Record]], bool]:
    return lambda records: any(r.get("phase") == "intent" and r.get("op") == op for r in records)


def step(name: str) -> Callable[[list[Record]], bool]:
    return lambda records: any(r.get("phase") == "step" and r.get("step") == name for r in records)


def env_for(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "SAND_STATE_DIR": str(state_dir), "NO_COLOR": "1"}
