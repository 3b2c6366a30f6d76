"""The order a piped or CI log shows, from the real ``python -m sand`` against fakepve
with stdout and stderr on one pipe: the plan first, then the progress, then the outcome,
for every output kind; and a terminal that cannot redraw (``TERM=dumb``) still gets
progress, as plain lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.cli.helpers import Sand, on_a_terminal


@pytest.fixture
def sand(tmp_path, fakepve_server) -> Sand:
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "o-1"}]))
    return s


def env_of(sand: Sand, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1", **extra}
    env.pop("PYTHONUNBUFFERED", None)  # as under pipx's `python -E`: it would not count
    return env


def one_pipe(sand: Sand, *args: str) -> list[str]:
    """The lines of ``sand ARGS`` with stdout and stderr on the same pipe, as a CI log."""
    proc = subprocess.run(
        [sys.executable, "-m", "sand", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=sand.workdir,
        env=env_of(sand),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout.splitlines()


def first(lines: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(lines) if re.search(pattern, line))


def test_a_piped_apply_shows_the_plan_before_its_progress(sand, fakepve_server):
    lines = one_pipe(sand, "apply", "--auto-approve")
    plan, step = first(lines, r"^Plan: 1 to add"), first(lines, r" o-1: ")
    done = first(lines, r"^Apply complete!")
    assert plan < step < done, "\n".join(lines)


def test_json_logs_show_the_plan_before_the_progress_events(sand, fakepve_server):
    lines = one_pipe(sand, "apply", "--auto-approve", "--log-format", "json")
    plan, step = first(lines, r"^Plan: 1 to add"), first(lines, r'"event": "progress"')
    assert plan < step, "\n".join(lines)


def test_a_dumb_terminal_gets_progress_as_lines(sand, fakepve_server):
    env = env_of(sand, TERM="dumb")
    screen, status = on_a_terminal(sand, "apply", "--auto-approve", env=env, stderr_too=True)
    assert status == 0, screen
    assert re.search(r"\d\d:\d\d:\d\d o-1: clone of template \d+ to VM \d+", screen), screen
    assert re.search(r"\d\d:\d\d:\d\d o-1: done", screen), screen
    assert screen.index("Plan: 1 to add") < screen.index(" o-1: ")
