"""The board's notifications (``notify:``): each refresh's agent state goes to an
:class:`sand.loops.notify.Announcer` on a thread of its own (a webhook may take
seconds to answer; the keys must not wait), one refresh after the other."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sand.cli.desktop import tell_desktop
from sand.errors import SandError
from sand.loops.notify import Announcer, Transition

if TYPE_CHECKING:
    from sand.agentstate import AgentReport
    from sand.cli.ui.fleet import Fleet, Snapshot
    from sand.manifest import LoadedManifest


class _Board(Protocol):
    """What the alerts use of the board (``sand.cli.ui.app.Board``, above this module)."""

    fleet: Fleet

    def say(self, text: str) -> None: ...

    def bell(self) -> None: ...

    def call_from_thread(self, callback: Callable[[], None]) -> object: ...


class BoardAlerts:
    def __init__(self, board: _Board) -> None:
        self.board = board
        self.gate = threading.Lock()  # one read at a time: the notifier's memory is one
        self.announce = Announcer(say=self._say, desktop=self._desktop)

    def seen(self, snapshot: Snapshot) -> None:
        loaded = self.board.fleet.loaded()
        if loaded is None or loaded.manifest.notify is None:
            return
        reports = {r.vm: r.agents for r in snapshot.rows if r.agents is not None}
        threading.Thread(target=self._tell, args=(loaded, reports), daemon=True).start()

    def _tell(self, loaded: LoadedManifest, reports: dict[str, AgentReport]) -> None:
        with self.gate:
            try:
                self.announce(loaded, reports)
            except SandError as exc:  # the webhook's secret could not be read
                self._say(f"notify: {exc}")

    def _say(self, text: str) -> None:
        self._on_board(lambda: self.board.say(text))

    def _desktop(self, t: Transition) -> None:
        tell_desktop(t, lambda: self._on_board(self.board.bell))

    def _on_board(self, fn: Callable[[], None]) -> None:
        # A board that has just closed has no loop left to call on: nothing to show then.
        with contextlib.suppress(RuntimeError):
            self.board.call_from_thread(fn)
