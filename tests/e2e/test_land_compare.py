"""``sand land --compare`` against real guests (issue 29, item 3): two forks of one
checkout, each on its own branch fork/<vm> made the way the fork step makes it; each
fork's branch, commits and changes since the fork point, and agent state, read in
one exchange per guest and told side by side."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.runner import SshRunner
from sand.verbs.compare import read_fork, render
from sand.verbs.target import connect
from tests.verbs.rig_helpers import GIT_SETUP, rig_endpoint, sh

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest

pytestmark = pytest.mark.e2e

# The source's checkout, then (as bundle/fork.sh does) the fork's branch made from its
# HEAD with its uncommitted work carried.
SOURCE = (
    GIT_SETUP
    + r"""
git init -q ~/app && cd ~/app
printf 'a\nb\n' > f && git add f && git commit -qm init
echo wip >> f
git checkout -q -b "fork/$FORK" --
"""
)
STATE = ".local/state/sand/agents.json"


def agent(state: str, since: int) -> str:
    record = {"agent": "claude", "session": "s1", "state": state, "since": since, "cwd": "~/app"}
    doc = json.dumps({"sessions": [record]})
    return f"mkdir -p ~/.local/state/sand && printf '%s' '{doc}' > ~/{STATE}\n"


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_two_forks_side_by_side(netns_guest: MakeGuest) -> None:
    now = int(time.time())
    one, two = netns_guest(), netns_guest()
    # try-1 worked: two commits, a change and a new file not yet added.
    await sh(
        one,
        "FORK=try-1\n" + SOURCE + "git commit -qam 'try one'\n"
        "printf 'x\\ny\\n' > g && git add g && git commit -qm 'more'\n"
        "echo more >> g\ntouch new.txt\n" + agent("working", now - 120),
    )
    # try-2 did nothing yet (its carried work is the source's, not its own).
    await sh(two, "FORK=try-2\n" + SOURCE + agent("idle", now - 30))
    views = []
    for vm, guest in (("try-1", one), ("try-2", two)):
        async with connect(rig_endpoint(guest)) as conn:
            views.append(await read_fork(SshRunner(conn), vm, ["~/app"]))
    first, second = (v.attempts[0] for v in views)
    assert (first.branch, first.ahead, first.untracked) == ("fork/try-1", 2, 1)
    assert (first.files, first.insertions, first.deletions) == (2, 4, 0)
    assert first.point is not None and len(first.point) == 40
    assert (second.branch, second.ahead, second.files, second.untracked) == ("fork/try-2", 0, 1, 0)
    table = render(views, now).splitlines()
    assert table[0].split() == ["VM", "PATH", "BRANCH", "AHEAD", "CHANGED", "SINCE", "THE",
                                "FORK", "POINT", "AGENT"]  # fmt: skip
    assert table[1].split() == ["try-1", "~/app", "fork/try-1", "2", "2", "files", "+4", "-0,",
                                "1", "untracked", "working", "2m"]  # fmt: skip
    assert table[2].split() == ["try-2", "~/app", "fork/try-2", "0", "1", "file", "+1", "-0",
                                "idle", "30s"]  # fmt: skip


async def test_a_checkout_without_a_fork_branch_says_so(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    await sh(guest, GIT_SETUP + "git init -q ~/app && cd ~/app && git commit -q --allow-empty -m i")
    async with connect(rig_endpoint(guest)) as conn:
        view = await read_fork(SshRunner(conn), "try-1", ["~/app", "~/gone"])
    app, gone = view.attempts
    assert (app.branch, app.point, app.ahead, app.changes()) == (
        "main",
        None,
        None,
        "(no fork point)",
    )
    assert gone.missing and gone.changes() == "(no checkout)"
    assert view.agents is not None and view.agents.sessions == ()


def test_sand_land_compare_names_forks_by_pattern(netns_guest: MakeGuest, tmp_path: Path) -> None:
    """The command: the declared VMs the pattern names, each guest read once, side by
    side; a VM the pattern does not name is left out, a stopped one says so."""
    import asyncio
    import os
    import subprocess
    import sys

    from tests.limactl_standin import StandIn

    one, two = netns_guest(), netns_guest()
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.back_with_guest("try-1", one)
    standin.back_with_guest("try-2", two)
    (tmp_path / "sand.yaml").write_text(
        "apiVersion: sand/v1\nproject: cmp\nbackends:\n  laptop: {type: lima, lima_home: ./lima}\n"
        "defaults: {image: debian-12, provision: false, disk: 20GiB, memory: 2GiB}\n"
        "repos:\n  app: {url: https://example.test/app.git, path: ~/app}\n"
        "vms:\n  - name: try-1\n    repos: [app]\n  - name: try-2\n    repos: [app]\n"
        "  - name: try-3\n    repos: [app]\n    state: stopped\n  - name: other\n"
    )
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(tmp_path / "state"),
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args], env=env, cwd=tmp_path, capture_output=True,
            text=True, timeout=300, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    applied = sand("apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    now = int(time.time())
    asyncio.run(
        sh(one, "FORK=try-1\n" + SOURCE + "git commit -qam 'try one'\n" + agent("working", now))
    )
    asyncio.run(sh(two, "FORK=try-2\n" + SOURCE))
    proc = sand("land", "--compare", "try-*")
    rows = [line.split()[:4] for line in proc.stdout.splitlines()[1:]]
    assert rows == [
        ["try-1", "~/app", "fork/try-1", "1"],
        ["try-2", "~/app", "fork/try-2", "0"],
        ["try-3", "-", "-", "-"],
    ], proc.stdout + proc.stderr
    assert "the VM is stopped" in proc.stdout
    assert proc.returncode == 1  # one fork could not be read
    assert "working" in proc.stdout.splitlines()[1]
