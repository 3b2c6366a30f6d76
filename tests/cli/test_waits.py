"""What a verb shows while it waits to reach a VM (``sand land``, ``shell``, ``cp``):
the step the backend is in, with its clock and limit, as an apply shows it; nothing
for a step that ends at once. Against fakepve, a guest whose agent never answers."""

from __future__ import annotations

import io
import os
import re
import selectors
import subprocess
import sys
import time

from sand.activity import Activity
from sand.cli.waits import StepClock, _WaitLines
from tests.cli.helpers import Sand


def test_land_says_the_wait_for_the_guest_agent(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "w-1"}]))
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (vm,) = fakepve_server.vms()
    fakepve_server.stop_agent(vm.vmid)  # its address never comes
    child = subprocess.Popen(
        [sys.executable, "-m", "sand", "land", "w-1"],
        cwd=tmp_path,
        env={**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = first_line(child, "waiting for the guest agent")
    finally:
        child.kill()
        child.wait()
    assert re.match(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d w-1: waiting for the guest agent to report an "
        r"address \(limit 300s\)$",
        said,
    ), said


def first_line(child: subprocess.Popen[str], words: str) -> str:
    """The first line of the child's stderr holding ``words`` (within a minute)."""
    assert child.stderr is not None
    pick = selectors.DefaultSelector()
    pick.register(child.stderr, selectors.EVENT_READ)
    seen: list[str] = []
    deadline = time.monotonic() + 60  # a guard, not a speed target
    while time.monotonic() < deadline and pick.select(timeout=deadline - time.monotonic()):
        line = child.stderr.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if words in line:
            return seen[-1]
    raise AssertionError(f"never said {words!r}: {seen}")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_step_with_its_clock_and_limit_then_nothing(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    screen = Terminal()
    view = _WaitLines("w-1", screen, quiet=2.0, heartbeat=10.0)
    steps = StepClock()
    steps.heard(Activity("connecting over SSH to 10.0.0.7:22", limit=30))
    view(steps)
    assert screen.getvalue() == ""  # a step that ends at once shows nothing
    steps.heard(Activity("waiting for the guest agent to report an address", limit=300))
    steps.began -= 45  # 45 s into the wait
    view(steps)
    assert screen.getvalue() == (
        "\r\x1b[Kw-1: waiting for the guest agent to report an address  45s / 300s"
    )
    steps.heard(Activity())  # reached: the line goes before the verb speaks
    view(steps)
    assert screen.getvalue().endswith("300s\r\x1b[K")
