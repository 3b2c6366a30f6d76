"""Putting the rows into the table without holding a key.

A DataTable measures every row it is given on the UI thread (about a third of a
second for a thousand), so a refresh that rebuilt the table each time would hold
the keys pressed meanwhile. Here a refresh that leaves the same VMs in the same
order touches only the cells that changed (nothing at all for a quiet fleet); a
new set of rows is added a chunk at a time, each chunk its own turn of the event
loop, so keys are handled between chunks.

The table itself is a :class:`RowsTable`: a DataTable that draws its lines again once
it has measured what it was given (see there).

The view also fits the rows to the width (:func:`sand.cli.ui.columns.columns_that_fit`):
it keeps every row's whole cells and draws the columns that fit, each whole (a VM's
role or a SYNC reason left out when there is no room for them), an apply's step cut
to the room left, and fits them again when the terminal is resized.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from sand.cli.ui.columns import Fit, cell_width, columns_that_fit
from sand.cli.ui.model import COLUMNS, LAST_COLUMN, Cell

CHUNK = 50  # rows added per turn of the event loop (the table measures them, ~20 ms)
SCROLLBAR = 2  # the table's vertical scrollbar, there as soon as the rows overflow it
LAST = COLUMNS.index(LAST_COLUMN)


class RowsTable(DataTable[Any]):
    """A DataTable whose lines are drawn again once it has measured its rows.

    Textual's DataTable (8.2) measures the rows and cells it is given when it next goes
    idle, but keys the lines it has drawn on a count of changes that measuring does not
    move (textual#4470). A screen painted in between (a loaded machine; a pilot's pause)
    kept every column as wide as its header until the next change, which on a quiet
    fleet never comes."""

    _measured: tuple[int, ...] = ()  # the columns' widths the lines were last drawn at

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        super()._update_dimensions(new_rows)
        widths = tuple(c.get_render_width(self) for c in self.ordered_columns)
        if widths != self._measured:
            self._measured = widths
            self._update_count += 1  # the key of every line drawn before: not used again
            self.refresh()


class RowsView:
    def __init__(self, table: DataTable[Any], later: Callable[..., Any], width: int = 0) -> None:
        self.table = table
        self.later = later  # App.call_later: run after the messages already queued
        self.width = width  # the cells the table has; 0: not known (draw every column)
        self.keys: list[str] = []
        self.cells: list[tuple[Cell, ...]] = []  # whole rows, drawn or not
        self.generation = 0
        self.fit = Fit()
        self._add_columns()

    def show(
        self, keys: Sequence[str], cells: Sequence[tuple[Cell, ...]], selected: str | None
    ) -> None:
        fit = self._fitting(cells)
        if list(keys) == self.keys and fit.shape == self.fit.shape:
            self.fit = fit
            self._update(cells)
            return
        self._redraw(list(keys), list(cells), selected, fit)

    def resize(self, width: int, selected: str | None) -> None:
        """The terminal's new width: the same rows, fitted to it."""
        self.width = width
        if len(self.cells) == len(self.keys):  # else: once all are in
            self._refit(selected)

    def _refit(self, selected: str | None) -> bool:
        """Fit the rows drawn to the width again; True when that took other columns
        and so drew them all again. Only the columns drawn (and the halves of cells
        kept) cost a redraw: the room left for a step changes with any cell's width,
        and is only taken."""
        fit = self._fitting(self.cells)
        if fit.shape == self.fit.shape:
            self.fit = fit
            return False
        self._redraw(self.keys, list(self.cells), selected, fit)
        return True

    def _fitting(self, cells: Sequence[tuple[Cell, ...]]) -> Fit:
        # The scrollbar takes its two cells only when the rows overflow the table's
        # height (not laid out yet: assume they will); at 80 columns they count.
        lines = self.table.size.height - 1  # under the header
        bar = SCROLLBAR if lines <= 0 or len(cells) > lines else 0
        room = self.width - bar if self.width > 0 else 0
        return columns_that_fit(cells, room, self.table.cell_padding)

    def _redraw(
        self, keys: list[str], cells: list[tuple[Cell, ...]], selected: str | None, fit: Fit
    ) -> None:
        self.generation += 1
        columns_change = fit.drawn != self.fit.drawn
        self.table.clear(columns=columns_change)
        self.fit = fit
        if columns_change:
            self._add_columns()
        self.keys, self.cells = keys, []
        self._add(cells, selected, self.generation)

    def _add_columns(self) -> None:
        for column in COLUMNS[: self.fit.drawn]:
            self.table.add_column(column, key=column)

    def _drawn(self, cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
        """The cells of a row that are drawn, as the fit draws them."""
        return tuple(self._shown(i, cell) for i, cell in enumerate(cells[: self.fit.drawn]))

    def _shown(self, column: int, cell: Cell) -> Cell:
        """A cell as drawn: an apply's step cut to the room there is, a VM's role or a
        SYNC reason left out when the fit gave it way."""
        return self._cut(cell) if column == LAST else self.fit.cell(column, cell)

    def _cut(self, cell: Cell) -> Cell:
        room = self.fit.step_room
        if room is None or cell_width(cell) <= room:
            return cell
        text = cell.copy() if isinstance(cell, Text) else Text(cell)
        text.truncate(room, overflow="ellipsis")
        return text

    def _update(self, cells: Sequence[tuple[Cell, ...]]) -> None:
        for row, (new, old) in enumerate(zip(cells, self.cells, strict=False)):
            for column, (a, b) in enumerate(zip(new[: self.fit.drawn], old, strict=False)):
                if a != b:
                    value = self._shown(column, a)
                    self.table.update_cell_at(Coordinate(row, column), value, update_width=True)
        self.cells = list(cells)

    def _add(self, pending: list[tuple[Cell, ...]], selected: str | None, generation: int) -> None:
        if generation != self.generation:
            return  # a newer set of rows replaced these
        batch, rest = pending[:CHUNK], pending[CHUNK:]
        start = len(self.cells)
        self.table.add_rows([self._drawn(cells) for cells in batch])
        self.cells.extend(batch)
        if selected in self.keys[start : start + len(batch)]:
            self.table.move_cursor(row=self.keys.index(selected), animate=False)
        if rest:
            self.later(self._add, rest, selected, generation)
        else:
            self._refit(selected)  # the width may have changed while the rows went in

    def set_cell(self, row: int, column: int, value: Cell, selected: str | None) -> None:
        """One cell now (an apply's step), if that row is drawn already; a column that
        gave way is kept for when it fits again. A step that outgrows the room left
        fits the rows again: the age (then more) gives way to it until the apply is over."""
        if row >= len(self.cells):
            return  # it is drawn with the rest of its chunk, and the next tick redraws it
        cells = list(self.cells[row])
        cells[column] = value
        self.cells[row] = tuple(cells)
        room = self.fit.last_room
        outgrown = column == LAST and room is not None and cell_width(value) > room
        if outgrown and len(self.cells) == len(self.keys) and self._refit(selected):
            return
        if column < self.fit.drawn:
            shown = self._shown(column, value)
            self.table.update_cell_at(Coordinate(row, column), shown, update_width=True)
