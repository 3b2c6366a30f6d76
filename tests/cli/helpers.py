"""Run the real `sand` command line against a fake backend: in this process (the
default, :mod:`tests.cli.inprocess`) or, for a test about the process itself, in a
subprocess of its own.

A test marked ``@pytest.mark.sand_process`` (signals, terminals, exit by signal, two
sands at once, what only a fresh interpreter shows) runs every ``Sand.run`` as
``python -m sand``; so does a run from a thread other than the main one or from inside
an event loop (sand's own ``asyncio.run`` and signal handlers need the main thread), and
every run when ``SAND_TEST_CLI=process`` is set (the whole suite the old way, to compare).
Both give the same ``subprocess.CompletedProcess``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


def as_from_a_terminal() -> None:
    """A child's ``preexec_fn``: SIGINT, SIGQUIT and SIGHUP at their defaults, as a shell
    starts a command in the foreground. A runner that started the tests in the background
    (``cmd &`` without job control, or under nohup) left them ignored; Python then sets no
    KeyboardInterrupt handler, and a test sending Ctrl-C would see it ignored, which says
    nothing of sand."""
    import signal

    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@dataclass
class Sand:
    workdir: Path

    @property
    def manifest(self) -> Path:
        return self.workdir / "sand.yaml"

    @property
    def state_dir(self) -> Path:
        return self.workdir / "state"

    def write(self, data: dict[str, Any]) -> Path:
        self.manifest.write_text(yaml.safe_dump(data, sort_keys=False))
        return self.manifest

    def run(
        self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "SAND_STATE_DIR": str(self.state_dir), "NO_COLOR": "1"}
        full_env.update(env or {})
        return run_sand(list(args), cwd=self.workdir, env=full_env, stdin=stdin)

    def plan_json(self, *extra: str) -> dict[str, Any]:
        proc = self.run("plan", "--json", *extra)
        assert proc.returncode in (0, 2), proc.stderr
        return json.loads(proc.stdout)


def run_sand(
    args: list[str], *, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``sand ARGS`` with exactly this environment: in this process, or as ``python -m
    sand`` where the test is about the process (see the module's docstring)."""
    if not _in_a_process_of_its_own():
        from tests.cli.inprocess import run_in_process

        return run_in_process(args, cwd=cwd, env=env, stdin=stdin)
    return subprocess.run(
        [sys.executable, "-m", "sand", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        input=stdin,
        timeout=300,
        check=False,
    )


# Set by the autouse fixture ``sand_process_marker`` (tests/conftest.py) for a test
# marked ``sand_process``.
PROCESS_MARKED = False


def _in_a_process_of_its_own() -> bool:
    if PROCESS_MARKED or os.environ.get("SAND_TEST_CLI") == "process":
        return True
    if threading.current_thread() is not threading.main_thread():
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def on_a_terminal(
    sand: Sand, *args: str, env: dict[str, str], stderr_too: bool = False
) -> tuple[str, int]:
    """What ``sand ARGS`` writes to its stdout (and, with ``stderr_too``, its stderr)
    when that is a terminal (a pty), and its exit status."""
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sand", *args],
        cwd=sand.workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=child,
        # Off the terminal: nowhere (a pipe nobody reads would fill, and stay open).
        stderr=child if stderr_too else subprocess.DEVNULL,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(main)
    return b"".join(chunks).decode(errors="replace"), proc.returncode
