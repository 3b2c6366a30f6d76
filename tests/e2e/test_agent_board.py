"""`sand ui` shows each agent's state from real guests (netns sshd behind the limactl
stand-in, provisioned by a real `sand apply`): a Claude Code hook fired in the guest
shows in the AGENT column and the detail pane at the next refresh; and what that read
costs per refresh: one SSH session per guest, and not one limactl call more than a
refresh that reads no guest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.ui_pilot import board, detail, observed, rows, until
from tests.e2e.test_agent_state import HEAD, Fleet

pytestmark = pytest.mark.e2e

TWO = HEAD + "  - name: dev-1\n  - name: dev-2\n    provision: false\n"


def sessions_accepted(guest: Any) -> int:
    return guest.log_text().count("Accepted publickey")


async def refreshed(pilot: Any, app: Any) -> None:
    taken = app.state.snapshot.taken
    await pilot.press("r")
    await until(pilot, lambda: app.state.snapshot.taken > taken, "a refresh")
    await until(pilot, lambda: not app.jobs.refreshing, "the refresh to end")
    await pilot.pause(0.05)


async def test_a_hook_fired_shows_on_the_board_at_the_next_refresh(
    tmp_path: Path, netns_guest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, TWO)
    for key, value in fleet.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    fleet.as_user("mkdir -p ~/work")

    app = board(tmp_path / "sand.yaml")
    async with app.run_test(size=(120, 30)) as pilot:
        await observed(pilot, app)
        # Nothing reported yet: the read happened, nothing to show.
        assert rows(app)["dev-1"]["AGENT"] == "-"
        assert rows(app)["dev-2"]["AGENT"] == "-"  # sand does not provision it: not read
        assert "(no session has reported)" in detail(app)

        base = {"session_id": "c-1", "cwd": f"{fleet.home}/work"}
        fleet.claude_hook("UserPromptSubmit", {**base, "prompt": "go"})
        await refreshed(pilot, app)
        assert re.fullmatch(r"working \d+s", rows(app)["dev-1"]["AGENT"]), rows(app)
        assert re.search(rf"claude c-1: working \d+s in {fleet.home}/work", detail(app))

        fleet.claude_hook(
            "Notification", {**base, "message": "Claude needs your permission to use Bash",
                             "notification_type": "permission_prompt"},
        )  # fmt: skip
        # The cost of one refresh, endpoints known: one SSH session to the guest, and
        # the same limactl calls as the listing alone.
        accepted = sessions_accepted(guest)
        fleet.standin.clear_log()
        await refreshed(pilot, app)
        assert re.fullmatch(r"needs input \d+s", rows(app)["dev-1"]["AGENT"])
        assert sessions_accepted(guest) == accepted + 1
        with_read = fleet.standin.commands()
    # A plain `sand status` lists the same way and contacts no guest.
    fleet.standin.clear_log()
    proc = fleet.sand("status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["vms"][0].get("agents") is None
    assert sorted(with_read) == sorted(fleet.standin.commands()), (with_read,)
