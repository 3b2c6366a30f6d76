"""Honest progress, as a person and a pipeline see it from the real ``python -m sand``
against fakepve: each step with its own clock and, for a bounded wait, its limit; retries
shown as they are scheduled ("PVE 503, retry 1/5 in 0.4s"); timestamped plain lines off a
terminal; ``apply --json`` one JSON object per line, every line valid against
sand/schemas/apply.schema.json; and behind the retries, the far side: one VM, made once."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import time

import pytest

from sand.activity import Retry
from sand.apply.events import Phase, StepEvent
from sand.cli.progress import LineView, progress_view, write_json_line
from tests.cli.helpers import Sand, on_a_terminal
from tests.machine_schemas import validate

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


@pytest.fixture
def sand(tmp_path, fakepve_server) -> Sand:
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "p-1"}]))
    return s


def env_of(sand: Sand, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), **extra}
    env.pop("NO_COLOR", None)
    return env


def test_apply_json_is_one_event_per_line_with_limits_and_retries(sand, fakepve_server):
    # PVE answers the clone with 503 twice, then takes it.
    fakepve_server.fail("POST", "/clone", 503, "Service Unavailable", times=2)
    proc = sand.run("apply", "--auto-approve", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert all(line.startswith("{") for line in lines), proc.stdout  # nothing but JSON
    assert "\x1b[" not in proc.stdout
    events = [json.loads(line) for line in lines]
    for event in events:
        validate("apply", event)
    assert events[0]["type"] == "plan" and events[0]["plan"]["summary"]["add"] == 1
    assert events[-1]["type"] == "outcome" and events[-1]["converged"] is True
    assert [r["vm"] for r in events[-1]["results"]] == ["p-1"]

    retries = [e for e in events if e["type"] == "retry"]
    assert [(r["retry"]["attempt"], r["retry"]["attempts"]) for r in retries] == [(1, 5), (2, 5)]
    for r in retries:
        assert r["vm"] == "p-1" and r["retry"]["layer"] == "proxmox"
        assert r["retry"]["reason"] == "PVE 503"
    # Jittered, exponential: the n-th wait lies in [initial*2**(n-1)/2, initial*2**(n-1)].
    first, second = (r["retry"]["delay"] for r in retries)
    assert 0.25 <= first <= 0.5 and 0.5 <= second <= 1.0

    steps = [e for e in events if e["type"] == "step"]
    clone = next(e for e in steps if e["step"].startswith("clone of template 9000"))
    assert clone["limit"] == 1800 and clone["phase"] == "creating"
    assert steps[-1]["phase"] == "done"
    # The far side: the retried request made one VM, not three.
    assert [vm.name for vm in fakepve_server.vms()] == ["p-1"]
    assert fakepve_server.count("POST", contains="/clone") == 3

    # Nothing to do: still a plan line and an outcome line.
    again = sand.run("apply", "--auto-approve", "--json")
    assert again.returncode == 0, again.stderr
    quiet = [json.loads(line) for line in again.stdout.splitlines()]
    assert [e["type"] for e in quiet] == ["plan", "outcome"]
    for event in quiet:
        validate("apply", event)


def test_plain_lines_carry_timestamps_limits_and_retries(sand, fakepve_server):
    fakepve_server.fail("POST", "/clone", 503, "Service Unavailable", times=1)
    proc = sand.run("apply", "--auto-approve")  # stderr is a pipe: plain lines
    assert proc.returncode == 0, proc.stdout + proc.stderr
    progress = [line for line in proc.stderr.splitlines() if " p-1: " in line]
    assert progress and all(re.match(rf"^{STAMP} p-1: ", line) for line in progress), progress
    text = "\n".join(progress)
    assert re.search(r"p-1: PVE 503, retry 1/5 in 0\.\ds", text), text
    assert re.search(r"p-1: clone of template 9000 to VM \d+ \(limit 1800s\)", text), text
    assert "\x1b[" not in proc.stderr


@pytest.mark.real_clock  # still-lines come on their own clock
def test_a_quiet_step_gets_still_lines_on_its_own_clock():
    out = io.StringIO()
    view = LineView(out, heartbeat=0.3)
    view.start()
    try:
        view.on_step(StepEvent("a", Phase.CREATING, "waiting for the guest agent", limit=300))
        time.sleep(1.0)
        view.on_step(StepEvent("a", Phase.CREATING, retry=Retry("proxmox", "PVE 503", 1, 5, 1.6)))
        view.on_step(StepEvent("a", Phase.DONE))
        time.sleep(0.6)  # done: no more "still" lines for it
    finally:
        view.stop()
    lines = out.getvalue().splitlines()
    assert re.match(rf"^{STAMP} a: waiting for the guest agent \(limit 300s\)$", lines[0])
    still = [line for line in lines if ": still " in line]
    assert len(still) >= 2, lines
    assert re.search(r"a: still waiting for the guest agent \[\d+s of 300s\]$", still[0])
    assert lines[-2].endswith("a: PVE 503, retry 1/5 in 1.6s") and lines[-1].endswith("a: done")


@pytest.mark.real_clock  # the live clock against each limit
@pytest.mark.fakepve_rig(time_scale=1.0)
def test_the_live_view_runs_each_steps_clock_against_its_limit(sand, fakepve_server):
    fakepve_server.set_task_secs("qmclone", 3.0)
    fakepve_server.fail("POST", "/clone", 503, "Service Unavailable", times=1)
    env = env_of(sand, TERM="xterm", COLUMNS="140")
    screen, status = on_a_terminal(
        sand, "apply", "--auto-approve", "--no-color", env=env, stderr_too=True
    )
    assert status == 0, screen
    # The retry, counting down to its try.
    assert re.search(r"PVE 503, retry 1/5 in 0\.\ds", screen), screen
    # The clone's own clock against its limit, moving while PVE works (no new event
    # arrives during the 3 s task: the clock runs on its own).
    clocks = set(re.findall(r"clone of template 9000 to VM \d+\s+(\d+)s / 1800s", screen))
    assert {"1", "2"} <= clocks, screen
    assert "Apply complete! Resources: 1 added" in screen
    assert [vm.name for vm in fakepve_server.vms()] == ["p-1"]


class CountedWrites(io.StringIO):
    """A stream that counts the writes it is given (each one a write(2) on a pipe)."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


async def test_a_burst_of_events_goes_out_in_one_write_at_the_end_of_the_loops_pass():
    out = CountedWrites()
    view = LineView(out)
    for i in range(200):  # a cold apply's 200 VMs, each starting its first step
        view.on_step(StepEvent(f"vm-{i}", Phase.CREATING, "clone of template 9000"))
    assert out.getvalue() == ""  # not yet: the pass is not over
    await asyncio.sleep(0)
    lines = out.getvalue().splitlines()
    assert out.writes == 1 and len(lines) == 200
    assert [line.split()[1] for line in lines] == [f"vm-{i}:" for i in range(200)]
    view.on_step(StepEvent("vm-0", Phase.DONE))
    view.stop()  # what is left goes out when the view ends
    assert out.getvalue().splitlines()[-1].endswith("vm-0: done") and out.writes == 2


async def test_apply_json_events_of_one_pass_go_out_together_and_before_the_outcome():
    out = CountedWrites()
    with progress_view("json", out) as view:
        for i in range(50):
            view.on_step(StepEvent(f"vm-{i}", Phase.CREATING, "clone of template 9000"))
        await asyncio.sleep(0)
        view.on_step(StepEvent("vm-0", Phase.DONE))
    write_json_line(out, "outcome", {"converged": True})
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["vm"] for e in events[:50]] == [f"vm-{i}" for i in range(50)]
    assert events[50]["phase"] == "done" and events[-1]["type"] == "outcome"
    assert out.writes == 3
