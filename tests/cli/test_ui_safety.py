"""What the board never shows, and how it honours NO_COLOR.

Canary: a secret value the manifest's VMs use, resolved by the board as `sand plan`
resolves it, is planted where a careless board would show it: in the last apply's
error, the provisioning log and the journal on this host (as an older sand or a hand
edit could leave them). Every screen the keys reach is exported as SVG and read as
the person would read it: the value is on none of them, `[redacted]` stands in its
place, and no terminal control planted beside it survives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sand.state.journal import Journal, journal_path
from sand.state.paths import project_dir
from sand.state.provlog import record_provision_log
from tests.cli.helpers import Sand
from tests.cli.ui_fixed import FixedFleet
from tests.cli.ui_pilot import SIZE, board, detail, observed, until

CANARY = "canary-ui-0b7d5e1f-never-on-screen"


def plant(project: str, vm: str) -> None:
    """The canary where only a leak would carry it: sand's own host files."""
    records = project_dir(project) / "last-apply.json"
    record = {
        "backend": "pve",
        "action": "create",
        "ok": False,
        "error": f"guest said {CANARY}\x1b]0;owned\x07",
        "layer": "guest",
        "at": "2026-01-01T00:00:00Z",
    }
    records.write_text(json.dumps({vm: record}))
    record_provision_log(project, vm, "provision", False, ["ok so far"])
    logs = project_dir(project) / "provision-log.json"
    data = json.loads(logs.read_text())
    data[vm]["lines"] = [f"apt printed {CANARY}", "\x1b[2Jcleared?"]
    logs.write_text(json.dumps(data))
    journal = Journal(journal_path(project))
    entry = journal.begin("create", backend="pve", vm=vm, identity="100")
    journal.step(entry, f"cloned {CANARY}")


async def test_no_screen_shows_a_secret_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakepve_server: Any
) -> None:
    rig = fakepve_server
    sand = Sand(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))
    monkeypatch.setenv("SAND_TEST_UI_SECRET", CANARY)
    scoped = [{"name": "API_TOKEN", "scope": "~/work"}]
    data = rig.manifest(
        [{"name": "agent-1", "secrets": scoped}],
        defaults={"provision": True},  # a VM that is given the value
        identity=str(rig.identity),
    )
    data["secrets"] = {"API_TOKEN": {"from": {"env": "SAND_TEST_UI_SECRET"}}}
    sand.write(data)
    plant("demo", "agent-1")

    app = board(sand.manifest)
    screens: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await until(pilot, lambda: "[redacted]" in detail(app), "the redacted detail")
        screens.append(app.export_screenshot())
        for key in ("p", "a", "question_mark"):
            await pilot.press(key)
            await pilot.pause(0.5)
            screens.append(app.export_screenshot())
            await pilot.press("escape")
            await pilot.pause(0.2)
        screens.append(app.export_screenshot())
    assert len(screens) == 5
    text = "\n".join(screens)
    assert CANARY not in text
    for fragment in (CANARY[:16], CANARY[-16:]):  # nor a piece of it
        assert fragment not in text
    assert "[redacted]" in text
    assert "owned" not in text and "\x1b" not in text  # the planted controls are gone
    assert rig.vms_named("agent-1") == []  # the a key's dialog was closed, nothing applied


FILL = re.compile(r'fill(?:="|:\s*)#([0-9a-fA-F]{6})')
CHROME = re.compile(r"<circle[^>]*>")  # the window's three buttons, drawn around the terminal


def colours(svg: str) -> set[str]:
    """Every colour of text or background in an SVG screenshot that is not a grey."""
    found = set()
    for hexa in FILL.findall(CHROME.sub("", svg)):
        r, g, b = (int(hexa[i : i + 2], 16) for i in (0, 2, 4))
        if max(r, g, b) - min(r, g, b) > 8:
            found.add(hexa)
    return found


@pytest.mark.parametrize("no_color", [False, True])
async def test_no_color_leaves_only_greys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_color: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    from sand.cli.ui.app import Board

    app = Board(FixedFleet(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        board_svg = app.export_screenshot()
        await pilot.press("a")
        await pilot.pause(0.3)
        dialog_svg = app.export_screenshot()
    if no_color:
        assert colours(board_svg) == set() and colours(dialog_svg) == set()
    else:  # the check can fail: the board is coloured without NO_COLOR
        assert colours(board_svg)
