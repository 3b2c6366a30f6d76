"""The board's compare view against real forks (issue 29, item 3, "or the board"):
agent-1 and two forks declared with ``from:``, made by a real ``sand apply`` through
the limactl stand-in (source stopped, cloned, started), each fork's guest a real one
whose checkout carries its branch ``fork/<vm>`` made as the fork step makes it. On the
board, ``c`` on a fork opens its source's forks side by side, as ``sand land
--compare`` shows them, read from the guests; ``r`` reads them again, Esc closes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.cli.ui.app import Board
from sand.cli.ui.screens import CompareScreen
from tests.cli.ui_pilot import board, detail, fitted, rows, until
from tests.e2e.test_land_compare import SOURCE, agent
from tests.limactl_standin import StandIn
from tests.verbs.rig_helpers import sh

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest

pytestmark = pytest.mark.e2e
WIDE = (160, 40)  # at 80x24 a fork's row shows its name only (tests/cli/test_ui_forks.py)

MANIFEST = """\
apiVersion: sand/v1
project: uicmp
backends:
  laptop: {type: lima, lima_home: ./lima}
defaults: {image: debian-12, provision: false, disk: 20GiB, memory: 2GiB}
repos:
  app: {url: https://example.test/app.git, path: ~/app}
vms:
  - name: agent-1
    repos: [app]
  - name: try-1
    from: {vm: agent-1}
  - name: try-2
    from: {vm: agent-1}
  - name: other
"""


def compare_rows(app: Board) -> list[list[str]]:
    """The compare view's table, each line split into words (after its header)."""
    screen = app.screen
    assert isinstance(screen, CompareScreen), type(screen)
    lines = screen.text.split("\n\n", 1)[1].splitlines()
    return [line.split() for line in lines]


async def test_c_on_a_fork_compares_its_sources_forks_read_from_their_guests(
    netns_guest: MakeGuest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, one, two = netns_guest(), netns_guest(), netns_guest()
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    for name, guest in (("agent-1", source), ("try-1", one), ("try-2", two)):
        standin.back_with_guest(name, guest)  # what each instance (a clone too) boots as
    (tmp_path / "sand.yaml").write_text(MANIFEST)
    env = {**standin.env(), "SAND_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    env.pop("LIMA_HOME")
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the board runs in this process
    monkeypatch.delenv("LIMA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args], env=dict(os.environ), cwd=tmp_path,
            capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    # The forks wait for their source in the first apply (blocked, exit 1); the second
    # makes them.
    first = sand("apply", "--auto-approve")
    assert "Not converged: try-1 blocked, try-2 blocked." in first.stderr, first.stdout
    applied = sand("apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    clones = [i.argv[i.argv.index("clone") + 1 :][:2] for i in standin.invocations()
              if "clone" in i.argv]  # fmt: skip
    made = sorted(new for old, new in clones if old == "agent-1")
    assert made == ["try-1", "try-2"], clones  # each fork a clone of agent-1
    now = int(time.time())
    await sh(one, "FORK=try-1\n" + SOURCE + "git commit -qam 'try one'\n" + agent("working", now))
    await sh(two, "FORK=try-2\n" + SOURCE + agent("idle", now - 30))

    app = board(tmp_path / "sand.yaml")
    async with app.run_test(size=WIDE) as pilot:  # room for the roles in the rows
        await fitted(pilot, app)
        table = rows(app)
        assert {"try-1 · fork of agent-1", "try-2 · fork of agent-1"} <= set(table), table
        assert table["try-1 · fork of agent-1"]["SYNC"] == "Synced"
        assert "agent-1" in table and "other" in table

        # On the source: its detail names its forks; c on it opens the same view.
        await pilot.press("c")
        await until(pilot, lambda: "read at" in shown_text(app), "a compare")
        assert compare_rows(app)[1][:4] == ["try-1", "~/app", "fork/try-1", "1"]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), "the view closed")
        assert "forks: try-1, try-2 (c compares them)" in detail(app)

        await pilot.press("j", "c")
        await until(pilot, lambda: "read at" in shown_text(app), "a compare")
        header, first, second = compare_rows(app)
        assert header[:4] == ["VM", "PATH", "BRANCH", "AHEAD"]
        # Commits since the fork point, what changed since it (the source's uncommitted
        # line, carried), and the agent's state, as each guest reports them.
        assert first[:9] == ["try-1", "~/app", "fork/try-1", "1", "1", "file", "+1", "-0",
                             "working"], first  # fmt: skip
        assert second[:9] == ["try-2", "~/app", "fork/try-2", "0", "1", "file", "+1", "-0",
                              "idle"], second  # fmt: skip
        assert "other" not in app.screen.text  # type: ignore[attr-defined]  # not a fork

        # r reads the guests again: try-2's new commit and file are there.
        await sh(two, "cd ~/app && git commit -qam 'try two' && touch new.txt")
        said = shown_text(app)
        await pilot.press("r")
        await until(pilot, lambda: shown_text(app) != said and "read at" in shown_text(app),
                    "a second read")  # fmt: skip
        second = compare_rows(app)[2]
        assert second[:10] == ["try-2", "~/app", "fork/try-2", "1", "1", "file", "+1", "-0,",
                               "1", "untracked"], second  # fmt: skip

        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), "the view closed")
        assert app.screen is app.screen_stack[0]  # the board, as it was


def shown_text(app: Board) -> str:
    return str(getattr(app.screen, "text", ""))
