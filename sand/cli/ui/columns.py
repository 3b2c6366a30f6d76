"""How the board's rows fit a terminal's width: which columns are drawn, and the room
an apply's step is cut to (the table's view measures with it as the width changes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text

from sand.cli.ui.model import COLUMNS, GIVE_WAY, LAST_COLUMN, Cell

_LAST = COLUMNS.index(LAST_COLUMN)


@dataclass(frozen=True)
class Fit:
    """What of the rows a width has room for: the first ``drawn`` of :data:`COLUMNS`,
    and ``last_room`` cells left for LAST APPLY (``None``: as many as it likes)."""

    drawn: int = len(COLUMNS)
    last_room: int | None = None

    @property
    def step_room(self) -> int | None:
        """The cells an apply's step is cut to: the room left, but a readable few."""
        return None if self.last_room is None else max(LAST_AT_LEAST, self.last_room)


# An apply's step is the one cell that grows while you watch ("clone of template 9000 to
# VM 100  2s / 1800s"): its words are cut to the room left, but never to fewer cells
# than keep its clock and a word readable (the detail pane has it whole).
LAST_AT_LEAST = 20


def columns_that_fit(cells: Sequence[tuple[Cell, ...]], width: int, padding: int = 1) -> Fit:
    """How the rows fit in ``width`` cells: every column when they fit (or the width is
    not known yet), else the address, the backend and the age give way; what is left for
    LAST APPLY once the others are drawn. Each column is as wide as its widest cell or
    its title, plus ``padding`` each side, as the table draws it."""
    if width <= 0:
        return Fit()
    widths = [cell_len(title) for title in COLUMNS]
    for row in cells:
        for i, cell in enumerate(row):
            n = cell_width(cell)
            if n > widths[i]:
                widths[i] = n
    drawn = len(COLUMNS)
    while drawn > len(COLUMNS) - GIVE_WAY and sum(widths[:drawn]) + 2 * padding * drawn > width:
        drawn -= 1
    others = sum(w for i, w in enumerate(widths[:drawn]) if i != _LAST) + 2 * padding * drawn
    return Fit(drawn, width - others)


def cell_width(cell: Cell) -> int:
    """The terminal cells ``cell`` takes."""
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)
