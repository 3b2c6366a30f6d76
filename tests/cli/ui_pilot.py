"""Driving the real board of ``sand ui`` with Textual's headless pilot: what is on the
table, in the detail pane and in the dialogs, read as text."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from sand.cli.ui.app import Board
from sand.cli.ui.fleet import Fleet

SIZE = (80, 24)  # what an SSH session in a default terminal gives


def board(manifest: Path, **options: Any) -> Board:
    return Board(Fleet(manifest), **options)


async def until(
    pilot: Pilot[Any], ok: Callable[[], object], what: str, timeout: float = 30
) -> None:
    """Let the board run until ``ok()`` holds (its jobs run on their own threads)."""
    stop = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > stop:
            raise AssertionError(f"timed out waiting for {what}; the board shows:\n"
                                 f"{screen_text(pilot.app)}")  # fmt: skip
        await pilot.pause(0.05)


def _base(app: Board) -> Any:
    """The board's own screen: ``app.query_one`` searches only the screen on top, so
    with a dialog open the title, rows and status would not be found."""
    return app.screen_stack[0]


def rows(app: Board) -> dict[str, dict[str, str]]:
    """The table as drawn: VM -> column -> cell."""
    table = _base(app).query_one("#table", DataTable)
    labels = [str(c.label) for c in table.ordered_columns]
    out = {}
    for index in range(table.row_count):
        cells = [str(c) for c in table.get_row_at(index)]
        out[cells[0]] = dict(zip(labels, cells, strict=True))
    return out


def detail(app: Board) -> str:
    return str(_base(app).query_one("#detail-text", Static).render())


def status(app: Board) -> str:
    return str(_base(app).query_one("#status", Static).render())


def title(app: Board) -> str:
    return str(_base(app).query_one("#title", Static).render())


def dialog(app: Board) -> str:
    """The text of the dialog on top (a plan, the help, the apply question)."""
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


def screen_text(app: Board) -> str:
    try:
        parts = [title(app), *(" | ".join(r.values()) for r in rows(app).values()),
                 detail(app), status(app)]  # fmt: skip
        if app.screen is not app.screen_stack[0]:
            parts.append("[dialog]\n" + dialog(app))
        return "\n".join(parts)
    except Exception as exc:  # a screen being torn down
        return f"({exc})"


def on_screen(app: Board) -> list[str]:
    """The terminal's lines as a person sees them: what is cut off by its edge is not
    there (the widgets' texts above are whole, drawn or not)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False, safe_box=False)  # fmt: skip
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text().splitlines()


async def fitted(pilot: Pilot[Any], app: Board) -> None:
    """Wait for every row to be in the table, fitted to the width."""
    await observed(pilot, app)
    view = app.rows_view
    await until(pilot, lambda: len(view.cells) == len(view.keys) == len(app.state.rows), "rows")
    await pilot.pause(0.1)


async def observed(pilot: Pilot[Any], app: Board) -> None:
    """Wait for the first observation to be drawn."""
    await until(pilot, lambda: app.state.snapshot is not None, "the first observation")
    await pilot.pause(0.05)


async def answer(pilot: Pilot[Any], app: Board, text: str) -> None:
    """Type ``text`` into the apply question and press Enter."""
    from sand.cli.ui.screens import ConfirmScreen

    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the apply question")
    await pilot.pause(0.05)
    for ch in text:
        await pilot.press(ch)
    await pilot.press("enter")


async def applied(pilot: Pilot[Any], app: Board, timeout: float = 60) -> None:
    await until(pilot, lambda: not app.jobs.applying, "the apply to end", timeout)
    await until(pilot, lambda: not app.jobs.refreshing, "the refresh after it")
    await pilot.pause(0.1)
