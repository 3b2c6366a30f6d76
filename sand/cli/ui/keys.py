"""The board's keys: what each one asks of the board and its jobs.

Bindings live here with the actions they call; :class:`sand.cli.ui.app.Board` mixes
the actions in (Textual reads ``BINDINGS`` from the App class itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Input

from sand.cli.ui.screens import KEYS, TextScreen

if TYPE_CHECKING:
    from sand.cli.ui.model import BoardRow
    from sand.cli.ui.state import BoardState
    from sand.cli.ui.work import Jobs

BINDINGS: list[BindingType] = [
    Binding("p", "plan", "plan"),
    Binding("a", "apply", "apply"),
    Binding("s", "shell", "shell"),
    Binding("l", "land", "land"),
    # Not in the footer (80 columns hold the others): the help and the detail pane say it.
    Binding("c", "compare", "compare", show=False),
    Binding("r", "refresh", "refresh"),
    Binding("slash", "filter", "filter", key_display="/"),
    Binding("question_mark", "help", "help", key_display="?"),
    Binding("q", "quit_board", "quit"),
    # The terminal's Ctrl-C is a key here (raw mode): it leaves as sand apply's does.
    Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
    Binding("escape", "clear_filter", show=False),
    Binding("j", "cursor_down", show=False),
    Binding("k", "cursor_up", show=False),
]


if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class KeyActions(_Base):
    """The actions behind :data:`BINDINGS`, as methods of the Board."""

    if TYPE_CHECKING:  # what the Board provides
        jobs: Jobs
        state: BoardState
        table: DataTable[object]

        def say(self, text: str) -> None: ...
        def selected_vm(self) -> str | None: ...
        def selected_row(self) -> BoardRow | None: ...
        def forks_of(self, source: str) -> list[str]: ...
        def leave(self, code: int) -> None: ...
        def _redraw_rows(self) -> None: ...

    def action_refresh(self) -> None:
        self.jobs.refresh()

    def action_plan(self) -> None:
        self.jobs.plan()

    def action_apply(self) -> None:
        self.jobs.apply()

    def action_land(self) -> None:
        vm = self.selected_vm()
        if vm is None:
            self.say("no VM selected")
            return
        self.jobs.land(vm)

    def action_compare(self) -> None:
        row = self.selected_row()
        if row is None:
            self.say("no VM selected")
            return
        source = row.fork_of or row.vm
        forks = self.forks_of(source)
        if not forks:
            self.say(f"{row.vm} is not a fork, and no VM on the board is a fork of it")
            return
        self.jobs.compare(source, forks)

    def action_shell(self) -> None:
        vm = self.selected_vm()
        if vm is None:
            self.say("no VM selected")
            return
        self.jobs.shell(vm)

    def action_help(self) -> None:
        self.push_screen(TextScreen("help", KEYS))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("open")
        box.value = self.state.filter
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.state.filter = event.value
            self._redraw_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.remove_class("open")
            self.table.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("open")
        box.value = ""
        self.state.filter = ""
        self._redraw_rows()
        self.table.focus()

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()

    def action_quit_board(self) -> None:
        if self.jobs.applying and not self.jobs.leaving:
            self.jobs.leaving = True
            self.say(
                "An apply is running: q again stops it where it is (the journal keeps what "
                "it left; the next sand apply settles it)."
            )
            return
        self.leave(0)

    def action_interrupt(self) -> None:
        self.leave(130)
