"""The board's rows view on a real Textual table (headless): the width decides the
columns drawn, a refresh that changes a few cells redraws no row, a resize fits the
rows again, and an apply's step that outgrows its room makes the age give way."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from sand.cli.ui.model import COLUMNS, LAST_COLUMN, Cell
from sand.cli.ui.table import RowsTable, RowsView

LAST, AGE = COLUMNS.index(LAST_COLUMN), COLUMNS.index("AGE")


def row(i: int, age: str = "3h", last: str = "ok 5m ago") -> tuple[Cell, ...]:
    cells = {"VM": f"agent-{i:03d}", "SYNC": "Synced", "HEALTH": "Healthy", "PROV": "yes",
             "POWER": "running", "AGENT": "working 3m", "LAST APPLY": last, "AGE": age,
             "BACKEND": "pve", "ADDRESS": f"10.0.0.{i % 250}"}  # fmt: skip
    return tuple(Text(cells[c]) for c in COLUMNS)


class Table(App[None]):
    CSS = "#t { height: 1fr; }"  # as the board's: rows going in do not resize it

    def compose(self) -> ComposeResult:
        yield RowsTable(id="t")

    def on_mount(self) -> None:
        self.view = RowsView(self.query_one(DataTable), self.call_later, self.size.width)

    def on_resize(self, event: events.Resize) -> None:  # as the board passes it on
        if hasattr(self, "view"):
            self.view.resize(event.size.width, None)


async def settled(pilot: Any, view: RowsView, n: int) -> None:
    stop = time.monotonic() + 10
    while len(view.cells) < n or view.table.row_count < n:
        assert time.monotonic() < stop, "the rows never went in"
        await pilot.pause(0.02)


def drawn_columns(view: RowsView) -> list[str]:
    return [str(c.label) for c in view.table.ordered_columns]


async def test_the_width_decides_and_a_refresh_redraws_no_row() -> None:
    app = Table()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.view
        keys = [f"agent-{i:03d}" for i in range(300)]
        view.show(keys, [row(i) for i in range(300)], None)
        await settled(pilot, view, 300)
        # The address and the backend gave way at 80 (the agent's state took their room).
        assert drawn_columns(view) == list(COLUMNS[:-2])
        drawn = view.generation

        # Ages tick over ("3h" -> "12h" widens a column) and one apply result comes in:
        # the cells change in place, no row is drawn again.
        later = [row(i, age="12h", last="failed 1m ago" if i == 7 else "ok 5m ago")
                 for i in range(300)]  # fmt: skip
        view.show(keys, later, None)
        await pilot.pause(0.05)
        assert view.generation == drawn
        assert str(view.table.get_cell_at(Coordinate(7, LAST))) == "failed 1m ago"
        assert str(view.table.get_cell_at(Coordinate(299, AGE))) == "12h"

        await pilot.resize_terminal(200, 24)
        await pilot.pause(0.1)
        assert drawn_columns(view) == list(COLUMNS) and view.generation == drawn + 1
        await settled(pilot, view, 300)
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.1)
        await settled(pilot, view, 300)
        assert drawn_columns(view) == list(COLUMNS[:-2])

        # An apply's step longer than the room left: the age and the backend give way to
        # it rather than scroll, and the step is cut to what is left, not the table's.
        step = Text("clone of template 9000 to VM 100 2s / 1800s")
        view.set_cell(3, LAST, step, "agent-003")
        await settled(pilot, view, 300)
        assert drawn_columns(view) == list(COLUMNS[:AGE])
        shown = str(view.table.get_cell_at(Coordinate(3, LAST)))
        assert view.fit.step_room is not None and len(shown) <= view.fit.step_room
        await pilot.pause(0.1)
        assert view.table.virtual_size.width <= 80
        assert view.table.cursor_row == 3  # the selection kept through the redraw


async def test_lines_painted_before_the_table_measured_its_rows_are_painted_again() -> None:
    """The table measures the rows it is given when it next goes idle; a screen painted
    before then (a loaded machine, or a pilot's pause) drew every column as wide as its
    header. Those lines must not stay once the rows are measured, nor after a cell
    widens its column."""
    app = Table()
    async with app.run_test(size=(80, 24)) as pilot:
        view, table = app.view, app.view.table
        await pilot.pause()  # the table focused and sized, as the board's is by a refresh
        view.show(["agent-000", "agent-001"], [row(0), row(1)], None)
        early = table.render_line(0).text  # what a screen painted now would show
        assert early.index("SYNC") == len(" VM ") + 1  # as wide as the headers, for now
        await pilot.pause()
        header, first = table.render_line(0).text, table.render_line(1).text
        assert header.index("SYNC") == len(" agent-000 ") + 1
        assert first.startswith(" agent-000  Synced  ")

        # A cell that widens its column: measured when the table next idles, too.
        wider = (*row(1)[:1], Text("OutOfSync"), *row(1)[2:])
        view.show(["agent-000", "agent-001"], [row(0), wider], None)
        table.render_line(0)
        await pilot.pause()
        assert table.render_line(0).text.index("HEALTH") == len(" agent-000  OutOfSync ") + 1
