"""Putting the rows into the table without holding a key.

A DataTable measures every row it is given on the UI thread (about a third of a
second for a thousand), so a refresh that rebuilt the table each time would hold
the keys pressed meanwhile. Here a refresh that leaves the same VMs in the same
order touches only the cells that changed (nothing at all for a quiet fleet); a
new set of rows is added a chunk at a time, each chunk its own turn of the event
loop, so keys are handled between chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual.coordinate import Coordinate
from textual.widgets import DataTable

from sand.cli.ui.model import Cell

CHUNK = 50  # rows added per turn of the event loop (the table measures them, ~20 ms)


class RowsView:
    def __init__(self, table: DataTable[Any], later: Callable[..., Any]) -> None:
        self.table = table
        self.later = later  # App.call_later: run after the messages already queued
        self.keys: list[str] = []
        self.cells: list[tuple[Cell, ...]] = []
        self.generation = 0

    def show(
        self, keys: Sequence[str], cells: Sequence[tuple[Cell, ...]], selected: str | None
    ) -> None:
        if list(keys) == self.keys:
            self._update(cells)
            return
        self.generation += 1
        self.table.clear()
        self.keys, self.cells = list(keys), []
        self._add(list(cells), selected, self.generation)

    def _update(self, cells: Sequence[tuple[Cell, ...]]) -> None:
        for row, (new, old) in enumerate(zip(cells, self.cells, strict=False)):
            for column, (a, b) in enumerate(zip(new, old, strict=True)):
                if a != b:
                    self.table.update_cell_at(Coordinate(row, column), a, update_width=True)
        self.cells = list(cells)

    def _add(self, pending: list[tuple[Cell, ...]], selected: str | None, generation: int) -> None:
        if generation != self.generation:
            return  # a newer set of rows replaced these
        batch, rest = pending[:CHUNK], pending[CHUNK:]
        start = len(self.cells)
        self.table.add_rows(batch)
        self.cells.extend(batch)
        if selected in self.keys[start : start + len(batch)]:
            self.table.move_cursor(row=self.keys.index(selected), animate=False)
        if rest:
            self.later(self._add, rest, selected, generation)

    def set_cell(self, row: int, column: int, value: Cell) -> None:
        """One cell now (an apply's step), if that row is drawn already."""
        if row < len(self.cells):
            self.table.update_cell_at(Coordinate(row, column), value, update_width=True)
            cells = list(self.cells[row])
            cells[column] = value
            self.cells[row] = tuple(cells)
