"""SVG snapshots of the board's main screens at 80x24 (pytest-textual-snapshot): the
fleet, a VM's detail, the help, a plan, the apply question, an apply's results in the
rows, the filter, the board under NO_COLOR, forks and a warm pool's spares, and the
compare view of two forks. The fleet is fixed (tests/cli/ui_fixed.py)
so a picture changes only when the drawing does; update them with
``pytest tests/cli/test_ui_snapshots.py --snapshot-update`` and look at the report."""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from sand.apply.events import Phase, StepEvent
from sand.cli.ui.app import Board
from sand.cli.ui.screens import CompareScreen, ConfirmScreen, TextScreen
from tests.cli.ui_fixed import FixedFleet, ForkFleet

SIZE = (80, 24)


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FixedFleet:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    fixed = FixedFleet(tmp_path)
    # The board's clock stands still: a picture must not depend on how long a loaded
    # machine took to reach it ("observed 1s ago" instead of 0s). Time is not the subject.
    clock = types.SimpleNamespace(time=lambda: fixed.now + 0.5, monotonic=time.monotonic)
    monkeypatch.setattr("sand.cli.ui.app.time", clock)
    return fixed


async def drawn(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, Board)
    for _ in range(500):
        # Every row in the table, fitted to the width: the rows go in a chunk at a time,
        # and a table wider than the terminal is drawn again with the columns that fit.
        view = getattr(app, "rows_view", None)
        rows = len(app.state.rows)
        if app.state.snapshot is not None and view and len(view.cells) == len(view.keys) == rows:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


async def shown(pilot: Pilot[Any], screen: type[Any]) -> None:
    """Until ``screen`` is up (a plan is made on a worker: a loaded machine takes longer
    than any fixed pause), then a moment for it to draw."""
    for _ in range(1000):
        if isinstance(pilot.app.screen, screen):
            break
        await pilot.pause(0.02)
    await pilot.pause(0.3)


def test_the_fleet(fleet: FixedFleet, snap_compare: Any) -> None:
    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=drawn)


def test_a_vm_out_of_sync_in_detail(fleet: FixedFleet, snap_compare: Any) -> None:
    assert snap_compare(Board(fleet), press=["j"], terminal_size=SIZE, run_before=drawn)


def test_the_help(fleet: FixedFleet, snap_compare: Any) -> None:
    assert snap_compare(Board(fleet), press=["question_mark"], terminal_size=SIZE,
                        run_before=drawn)  # fmt: skip


def test_a_plan(fleet: FixedFleet, snap_compare: Any) -> None:
    async def planned(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        await pilot.press("p")
        await shown(pilot, TextScreen)

    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=planned)


def test_the_apply_question(fleet: FixedFleet, snap_compare: Any) -> None:
    async def asked(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        await pilot.press("a")
        await shown(pilot, ConfirmScreen)
        # A blinking cursor is drawn or not depending on when the picture is taken.
        pilot.app.screen.query_one("#answer").cursor_blink = False  # type: ignore[attr-defined]
        await pilot.pause(0.05)

    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=asked)


def test_an_apply_in_the_rows(fleet: FixedFleet, snap_compare: Any) -> None:
    async def stepped(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        app = pilot.app
        assert isinstance(app, Board)
        app.show_step(StepEvent("agent-2", Phase.DONE, elapsed=14.0, backend="laptop"))
        app.show_step(StepEvent("agent-3", Phase.FAILED, elapsed=2.1, layer="ssh"))
        await pilot.pause(0.1)

    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=stepped)


def test_the_filter(fleet: FixedFleet, snap_compare: Any) -> None:
    async def filtered(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        app = pilot.app
        assert isinstance(app, Board)
        # A blinking cursor is drawn or not depending on when the picture is taken.
        app.query_one("#filter").cursor_blink = False  # type: ignore[attr-defined]
        await pilot.press("slash")
        # Under load the box may take a moment to take the focus; a letter typed before
        # then is a key of the board's own (a: apply).
        for _ in range(200):
            if app.focused is not None and app.focused.id == "filter":
                break
            await pilot.pause(0.02)
        await pilot.press("a", "g", "e", "n", "t", "space", "o", "u", "t")
        for _ in range(200):
            if app.state.filter == "agent out":
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)

    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=filtered)


def test_no_color(fleet: FixedFleet, snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(Board(fleet), terminal_size=SIZE, run_before=drawn)


@pytest.fixture
def forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet: FixedFleet) -> ForkFleet:
    forked = ForkFleet(tmp_path)
    forked.now = fleet.now  # the board's clock, stood still by the fleet fixture
    # The compare view's "read at" too (a picture must not show the hour it was taken).
    clock = types.SimpleNamespace(
        time=lambda: fleet.now + 0.5,
        localtime=lambda _: time.gmtime(0),
        strftime=time.strftime,
        monotonic=time.monotonic,  # the read's own clock while it waits
    )
    monkeypatch.setattr("sand.cli.ui.work.time", clock)
    return forked


def test_forks_and_spares(forks: ForkFleet, snap_compare: Any) -> None:
    """Two forks of agent-1, a new VM that claims a spare, the refill of its slot, and
    the pool's other spare, after the person's VMs; the detail of a fork."""
    assert snap_compare(Board(forks), press=["j"], terminal_size=SIZE, run_before=drawn)


def test_the_compare_view(forks: ForkFleet, snap_compare: Any) -> None:
    async def compared(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        await pilot.press("j", "c")
        await shown(pilot, CompareScreen)
        app = pilot.app
        for _ in range(500):
            if "read at" in getattr(app.screen, "text", ""):
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)

    assert snap_compare(Board(forks), terminal_size=SIZE, run_before=compared)
