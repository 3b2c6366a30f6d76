"""The board's dialogs: a scrollable text (a plan, the help, a land sweep) and the
apply confirmation, which asks ``sand apply``'s question with its one rule."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from sand.cli.confirm import apply_question, approves

KEYS = """\
Keys of sand ui

  up/down, j/k   select a VM (its detail below the table)
  p              plan: what sand plan shows, in full (preflight, unpushed-work sweep)
  a              apply: the plan, then sand apply's question; only 'yes' approves
  s              shell into the selected VM (its tmux session); the board comes back after
  l              land: sweep the selected VM's checkouts, as sand land reports them
  c              compare the selected fork's (or source's) forks, side by side
  r              refresh now (one listing per backend)
  /              filter the rows (every word must match); Esc clears it
  ?              this help
  q, Ctrl-C      quit

Columns: SYNC is Synced, OutOfSync (with what differs) or Unknown (with why);
PROV is whether the guest is provisioned as declared; LAST APPLY is the last
apply's result here, and what the engine is doing while an apply runs.
"""


class TextScreen(ModalScreen[None]):
    """A text to read and close (Esc, q or Enter)."""

    DEFAULT_CSS = """
    TextScreen { align: center middle; }
    TextScreen > VerticalScroll {
        width: 100%; height: 100%; border: round $accent; padding: 0 1;
    }
    """
    BINDINGS = [  # noqa: RUF012 (Textual reads the class attribute)
        Binding("escape,q,enter", "close", "close"),
    ]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        scroll = VerticalScroll()
        scroll.border_title = self.title_text
        scroll.border_subtitle = "Esc to close"
        with scroll:
            yield Static(self.text, markup=False, id="text")

    def action_close(self) -> None:
        self.dismiss(None)


class CompareScreen(ModalScreen[None]):
    """The forks of ``source`` side by side, as ``sand land --compare`` shows them:
    read-only, read by the board's jobs off the UI thread (``reread``: read them again,
    the ``r`` key), closed with Esc or q."""

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen > ScrollableContainer {
        width: 100%; height: 100%; border: round $accent; padding: 0 1;
    }
    CompareScreen #compare { width: auto; }
    """
    BINDINGS = [  # noqa: RUF012
        Binding("escape,q", "close", "close"),
        Binding("r", "reread", "read again"),
    ]

    def __init__(self, source: str, forks: list[str], reread: Callable[[], None]) -> None:
        super().__init__()
        self.source = source
        self.forks = forks
        self.reread = reread
        self.reading = False  # a read under way: r waits for it
        self.text = ""

    def compose(self) -> ComposeResult:
        # A table wider than the terminal scrolls sideways rather than wrap its rows.
        scroll = ScrollableContainer()
        scroll.border_title = f"forks of {self.source}, side by side (read-only)"
        scroll.border_subtitle = "r to read again · Esc to close"
        with scroll:
            yield Static(self.text, markup=False, id="compare")

    def show(self, text: str, reading: bool = False) -> None:
        self.text, self.reading = text, reading
        if self.is_mounted:
            self.query_one("#compare", Static).update(text)

    def action_reread(self) -> None:
        if not self.reading:
            self.reread()

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """The plan, then ``sand apply``'s question; True only when the answer is ``yes``.

    ``refusal``: why this plan may not run (the mass-delete guard): shown instead of
    the question, and nothing can approve it. A plan without changes is only shown."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > VerticalScroll {
        width: 100%; height: 1fr; border: round $warning; padding: 0 1;
    }
    ConfirmScreen > #ask { height: auto; padding: 0 1; }
    ConfirmScreen > Input { width: 100%; }
    """
    AUTO_FOCUS = "#answer"  # the person types the answer; nothing else takes a key
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "cancel", "cancel"),
    ]

    def __init__(self, plan_text: str, refusal: str | None, changes: bool) -> None:
        super().__init__()
        self.plan_text = plan_text
        self.refusal = refusal
        self.changes = changes

    def compose(self) -> ComposeResult:
        scroll = VerticalScroll()
        scroll.border_title = "apply: the plan"
        with scroll:
            yield Static(self.plan_text, markup=False, id="plan")
        if self.refusal is not None:
            yield Static(f"Refused: {self.refusal}. Esc to close.", markup=False, id="ask")
        elif not self.changes:
            yield Static("Nothing to apply. Esc to close.", markup=False, id="ask")
        else:
            yield Static(apply_question(), markup=False, id="ask")
            yield Input(placeholder="Enter a value", id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(approves(event.value))

    def action_cancel(self) -> None:
        self.dismiss(False)
