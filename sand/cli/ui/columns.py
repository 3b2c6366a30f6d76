"""How the board's rows fit a terminal's width: which columns are drawn, whether the VM
and SYNC cells keep their second half, and the room an apply's step is cut to (the
table's view measures with it as the width changes).

A column is drawn whole or not at all: the table never scrolls sideways to show half a
word ("runnin"). What gives way, in order, while the rows are too wide: the address,
the backend and the age (the detail pane has all three; an apply's step takes their
room); then LAST APPLY counts only the cells a step is cut to; then the VM cell keeps
its name without its role (" · fork of agent-1": the detail pane says it whole, the
filter finds it), then SYNC its word without its reason ("OutOfSync (create)"); then
the columns from the right, LAST APPLY first, never VM nor SYNC.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rich.cells import cell_len
from rich.text import Text

from sand.cli.ui.model import COLUMNS, GIVE_WAY, LAST_COLUMN, Cell

_LAST = COLUMNS.index(LAST_COLUMN)
_VM, _SYNC = COLUMNS.index("VM"), COLUMNS.index("SYNC")
# Where a cell's second half begins: the VM's role, SYNC's reason. Neither a VM's name
# nor a SYNC word holds a space, so the first one found is that boundary.
_SECOND_HALF = {_VM: " · ", _SYNC: " ("}
KEPT = 2  # VM and SYNC are always drawn


@dataclass(frozen=True)
class Fit:
    """What of the rows a width has room for: the first ``drawn`` of :data:`COLUMNS`,
    ``last_room`` cells left for LAST APPLY (``None``: as many as it likes), and
    whether the VM cells keep their roles and the SYNC cells their reasons."""

    drawn: int = len(COLUMNS)
    last_room: int | None = None
    roles: bool = True
    reasons: bool = True

    @property
    def step_room(self) -> int | None:
        """The cells an apply's step is cut to: the room left, but a readable few."""
        return None if self.last_room is None else max(LAST_AT_LEAST, self.last_room)

    @property
    def shape(self) -> tuple[int, bool, bool]:
        """What a change of fit redraws the rows for (the step's room is only taken)."""
        return self.drawn, self.roles, self.reasons

    def cell(self, column: int, cell: Cell) -> Cell:
        """``cell`` as this fit draws it in ``column``: its first half only, when the
        column gave its second half way."""
        keeps = self.roles if column == _VM else self.reasons if column == _SYNC else True
        return cell if keeps else first_half(column, cell)


# An apply's step is the one cell that grows while you watch ("clone of template 9000 to
# VM 100  2s / 1800s"): its words are cut to the room left, but never to fewer cells
# than keep its clock and a word readable (the detail pane has it whole). 16: what 80
# columns leave it beside an agent's "needs input 12m" and a SYNC word.
LAST_AT_LEAST = 16


def columns_that_fit(cells: Sequence[tuple[Cell, ...]], width: int, padding: int = 1) -> Fit:
    """How the rows fit in ``width`` cells (see the module's docstring for what gives
    way, in which order); what is left for LAST APPLY once the others are drawn. Each
    column is as wide as its widest cell or its title, plus ``padding`` each side, as
    the table draws it. A width not known yet (0) draws everything."""
    if width <= 0:
        return Fit()
    widths = [cell_len(title) for title in COLUMNS]
    halves = {column: cell_len(COLUMNS[column]) for column in _SECOND_HALF}
    for row in cells:
        for i, cell in enumerate(row):
            n = cell_width(cell)
            if n > widths[i]:
                widths[i] = n
        for i, separator in _SECOND_HALF.items():  # measured on the words: no Text made
            cell = row[i]
            plain = cell.plain if isinstance(cell, Text) else cell
            n = cell_len(plain.partition(separator)[0])
            if n > halves[i]:
                halves[i] = n

    def needs(fit: Fit, last: int) -> int:
        drawn = [last if i == _LAST else w for i, w in enumerate(widths[: fit.drawn])]
        drawn[_VM] = widths[_VM] if fit.roles else halves[_VM]
        drawn[_SYNC] = widths[_SYNC] if fit.reasons else halves[_SYNC]
        return sum(drawn) + 2 * padding * fit.drawn

    fit = Fit()
    # The address, the backend, the age: for the whole of an apply's step too.
    while fit.drawn > len(COLUMNS) - GIVE_WAY and needs(fit, widths[_LAST]) > width:
        fit = Fit(fit.drawn - 1)
    cut = min(widths[_LAST], max(LAST_AT_LEAST, cell_len(LAST_COLUMN)))  # a step, cut
    for narrower in _NARROWER:
        if needs(fit, cut) <= width:
            break
        fit = narrower(fit)
    return replace(fit, last_room=width - needs(fit, 0))


def _without_roles(fit: Fit) -> Fit:
    return replace(fit, roles=False)


def _without_reasons(fit: Fit) -> Fit:
    return replace(fit, reasons=False)


def _fewer(fit: Fit) -> Fit:
    return replace(fit, drawn=max(KEPT, fit.drawn - 1))


# After the address, the backend and the age: roles, reasons, then LAST APPLY, AGENT,
# POWER, PROV and HEALTH.
_NARROWER: tuple[Callable[[Fit], Fit], ...] = (
    _without_roles,
    _without_reasons,
    *[_fewer] * (len(COLUMNS) - GIVE_WAY - KEPT),
)


def first_half(column: int, cell: Cell) -> Cell:
    """The VM's name without its role, the SYNC word without its reason."""
    at = (cell.plain if isinstance(cell, Text) else cell).find(_SECOND_HALF[column])
    return cell if at < 0 else cell[:at]


def cell_width(cell: Cell) -> int:
    """The terminal cells ``cell`` takes."""
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)
