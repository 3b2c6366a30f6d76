"""``sand ui``: the board. Draws the model's rows, binds the keys, and runs everything
that reaches the world on threads of its own (:mod:`sand.cli.ui.work`), so no backend,
however slow or large, holds a key press.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Input, Static

from sand import defaults
from sand.apply.events import StepEvent
from sand.audit.entries import describe, last_entries
from sand.audit.log import LOG_FILE
from sand.audit.trail import audit_dir
from sand.cli.ui import work
from sand.cli.ui.alerts import BoardAlerts
from sand.cli.ui.detail import Detail, detail_text
from sand.cli.ui.fleet import Fleet, Snapshot
from sand.cli.ui.keys import BINDINGS, KeyActions
from sand.cli.ui.model import (
    COLUMNS,
    LAST_COLUMN,
    BoardRow,
    next_activity,
    painted,
    shown,
    summary,
)
from sand.cli.ui.state import BoardState
from sand.cli.ui.table import RowsTable, RowsView
from sand.cli.ui.work import read_detail_files
from sand.plan.model import Plan


class Board(KeyActions, App[int]):
    TITLE = "sand ui"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #title { height: 1; background: $panel; padding: 0 1; }
    #table { height: 1fr; min-height: 5; }
    #detail { height: 45%; border-top: solid $accent; padding: 0 1; }
    #status { height: 1; padding: 0 1; background: $panel; }
    #filter { dock: bottom; display: none; }
    #filter.open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = BINDINGS

    def __init__(
        self, fleet: Fleet, *, interval: float = defaults.BOARD_INTERVAL, watch: Any = None
    ) -> None:
        super().__init__()
        self.fleet = fleet
        self.interval = interval
        self.watch_runner = watch  # a sand.cli.ui.watching.BoardWatch, or None
        self.state = BoardState()
        self.jobs = work.Jobs(self)
        self.alerts = BoardAlerts(self)  # notify: for each refresh's agent state
        self.exit_code = 0

    # --- layout ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Held, not queried: a query goes to the screen on top, which a dialog (or the
        # board closing) leaves without these, while a timer may still be due.
        self.title_bar = Static(
            f"sand ui · {shown(self.fleet.manifest, 60)} · observing…", id="title"
        )
        self.table = RowsTable(id="table", cursor_type="row", zebra_stripes=True)
        self.detail_pane = Static("", markup=False, id="detail-text")
        self.status_bar = Static("", markup=False, id="status")
        yield self.title_bar
        yield self.table
        with VerticalScroll(id="detail"):
            yield self.detail_pane
        yield self.status_bar
        yield Input(placeholder="filter: words that must all match (Esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        table = self.table
        # Between chunks the board goes idle (the table measures what it was given then)
        # and handles the keys that came meanwhile.
        self.rows_view = RowsView(table, self._soon, self.size.width)
        self.set_interval(1.0, self._tick)  # the apply's clocks and the title's "ago"
        if self.watch_runner is not None:
            self.watch_runner.start(self)  # it observes on start and every --interval
        else:
            self.action_refresh()
            self.set_interval(self.interval, self.action_refresh)

    def on_resize(self, event: events.Resize) -> None:
        # The first one comes before the mount, which gives the view its width itself.
        # Fitted once laid out: whether the rows overflow depends on the table's height.
        if isinstance(getattr(self, "rows_view", None), RowsView):
            self.call_after_refresh(self._refit, event.size.width)

    def _refit(self, width: int) -> None:
        # The selection from the view itself: no query of a screen, which a dialog on
        # top (or the board closing) would leave without the table.
        view = self.rows_view
        row = view.table.cursor_row
        view.resize(width, view.keys[row] if 0 <= row < len(view.keys) else None)

    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        self.set_timer(0.005, partial(fn, *args))

    # --- what arrives from the workers ----------------------------------------------

    def on_call(self, message: work.Call) -> None:
        message.fn()

    def show_snapshot(self, snapshot: Snapshot) -> None:
        s = self.state
        s.snapshot, s.error = snapshot, ""
        if not self.jobs.applying and snapshot.taken > self.jobs.apply_finished:
            s.activity.clear()  # the last apply's results are in the records now
        s.rows = snapshot.rows
        self.alerts.seen(snapshot)
        if s.plan is None or s.plan_kind == "status" or snapshot.taken > s.plan_taken:
            s.plan, s.plan_kind = snapshot.plan, "status"
        self._redraw_rows()

    def show_plan(self, plan: Plan, kind: str = "plan") -> None:
        self.state.plan, self.state.plan_kind = plan, kind
        self.state.plan_taken = time.time()
        self._redraw_detail()

    def show_step(self, event: StepEvent) -> None:
        before = self.state.activity.get(event.vm)
        self.state.activity[event.vm] = next_activity(before, event, time.monotonic())
        self._redraw_activity(event.vm)

    def say(self, text: str) -> None:
        self.status_bar.update(shown(text, 300))

    def show_error(self, text: str) -> None:
        self.state.error = shown(text, 300)
        self.say(f"Error: {text}")
        self._redraw_title()

    def show_landing(self, vm: str, text: str) -> None:
        self.state.landing[vm] = text
        self._redraw_detail()

    # --- drawing -------------------------------------------------------------------

    def visible_rows(self) -> list[BoardRow]:
        if not self.state.filter:
            return self.state.rows
        return [r for r in self.state.rows if r.matches(self.state.filter)]

    def _redraw_rows(self) -> None:
        now, activity = time.time(), self.state.activity
        rows = self.visible_rows()
        made = self.state.snapshot.cells if self.state.snapshot is not None else {}
        # The refresh painted every row off this thread; only rows an apply is acting
        # on (or none painted yet) are painted here.
        cells = [
            made[r.vm]
            if r.vm in made and r.vm not in activity
            else painted(r, now, activity.get(r.vm), self.rows_view.fit.step_room)
            for r in rows
        ]
        self.rows_view.show([r.vm for r in rows], cells, self.selected_vm())
        self._redraw_title()
        self._redraw_detail()

    def _redraw_activity(self, vm: str) -> None:
        rows = self.visible_rows()
        index = next((i for i, r in enumerate(rows) if r.vm == vm), None)
        if index is None:
            return
        room = self.rows_view.fit.step_room
        cells = painted(rows[index], time.time(), self.state.activity.get(vm), room)
        column = COLUMNS.index(LAST_COLUMN)
        self.rows_view.set_cell(index, column, cells[column], self.selected_vm())
        if vm == self.selected_vm():
            self._redraw_detail()

    def _redraw_title(self) -> None:
        s = self.state
        parts = [f"sand ui · {shown(self.fleet.manifest, 40)}"]
        if s.snapshot is not None:
            parts.append(summary(s.rows))
            ago = max(0, int(time.time() - s.snapshot.taken))
            parts.append(f"observed {ago}s ago in {s.snapshot.seconds:.1f}s")
        else:
            parts.append("observing…")
        if s.filter:
            parts.append(f"filter: {shown(s.filter, 30)}")
        if s.error:
            parts.append("refresh failed (see below)")
        self.title_bar.update(" · ".join(parts))

    def _redraw_detail(self) -> None:
        row = self.selected_row()
        pane = self.detail_pane
        if row is None:
            pane.update("(no VM selected)" if self.state.rows else "")
            return

        plan = self.state.plan
        change = plan.change_for(row.backend, row.vm) if plan is not None else None
        project = plan.project if plan is not None else None
        journal, provlog = read_detail_files(project, row.vm)
        trail = audit_dir() / LOG_FILE
        detail = Detail(
            row,
            change=change,
            plan_kind=self.state.plan_kind,
            journal=journal,
            provision_log=provlog,
            landing=self.state.landing.get(row.vm),
            activity=self.state.activity.get(row.vm),
            forks=self.forks_of(row.vm),
            audit=[describe(r) for r in last_entries(trail, row.vm, project=project)],
        )
        pane.update(detail_text(detail))

    def _tick(self) -> None:
        if self.jobs.applying:
            for vm in list(self.state.activity):
                self._redraw_activity(vm)
        self._redraw_title()

    def selected_row(self) -> BoardRow | None:
        table = self.table
        rows = self.visible_rows()
        if not rows or table.cursor_row < 0 or table.cursor_row >= len(rows):
            return None
        return rows[table.cursor_row]

    def forks_of(self, source: str) -> list[str]:
        """The board's VMs that are forks of ``source``, in the board's order."""
        return [r.vm for r in self.state.rows if r.fork_of == source]

    def selected_vm(self) -> str | None:
        row = self.selected_row()
        return row.vm if row is not None else None

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._redraw_detail()

    def leave(self, code: int) -> None:
        self.exit_code = code
        self.exit(code, return_code=code)

    def on_unmount(self) -> None:
        # However the board ends: an open question is answered no, an apply is stopped
        # where it is, the watch ends.
        self.jobs.stop()
        if self.watch_runner is not None:
            self.watch_runner.stop()
