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
    # Nothing reads its output: a pipe would only fill (and block sand) and be left open.
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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


def only_the_killed_runs_tasks_take_time(rig: Any, *task_types: str) -> None:
    """On fakepve, after the kill: the tasks the killed run started keep their set time
    (the next run must wait for them); the next run's own tasks of these types end at
    once, their time not being the subject."""
    for task in task_types:
        rig.set_task_secs(task, 0)


def sand_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "sand", *args]


def intent(op: str) -> Callable[[list[Record]], bool]:
    return lambda records: any(r.get("phase") == "intent" and r.get("op") == op for r in records)


def step(name: str) -> Callable[[list[Record]], bool]:
    return lambda records: any(r.get("phase") == "step" and r.get("step") == name for r in records)


def task_started(kind: str) -> Callable[[list[Record]], bool]:
    """A PVE task of ``kind`` (``qmclone``, ``qmstart``...) is under way: its UPID is
    journalled as soon as PVE hands it out, so a kill now lands inside the task."""
    return lambda records: any(
        r.get("phase") == "step" and f":{kind}:" in str(r.get("upid", "")) for r in records
    )


def env_for(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "SAND_STATE_DIR": str(state_dir), "NO_COLOR": "1"}


def wait_for_strays(env_entry: str, timeout: float = 30.0) -> None:
    """Wait until no process carries ``env_entry`` (``NAME=value``) in its environment.

    SIGKILL ends sand, not the children it started in their own sessions (limactl, the
    sidecar writer): they run on and may still write after the kill. A test that builds
    a state "as the kill left it" waits for them first, or races them.
    """
    needle = env_entry.encode() + b"\0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(needle in _environ(p) for p in Path("/proc").iterdir() if p.name.isdigit()):
            return
        time.sleep(0.02)
    raise AssertionError(f"processes with {env_entry} still run after {timeout:.0f} s")


def _environ(proc_dir: Path) -> bytes:
    try:
        data = (proc_dir / "environ").read_bytes()
    except OSError:  # gone meanwhile, or not ours to read
        return b""
    return data + b"\0"
