"""AcceptLoop: a test server's accept thread that a close really ends.

A thread left waiting in ``accept`` on a socket another thread closes keeps that
socket listening (Linux does not wake it), and once the wait is restarted (after a
signal the kernel restarts the call for) it accepts on whatever socket has taken
the closed one's descriptor number since: in a later test on the same worker, that
test's own server. Its client then talks to the stale server's handler instead (a
forge stand-in's client read a guest's sshd banner through
:class:`tests.rig.slowdoor.SlowDoor`). So the loop waits in short turns and
``close`` stops and joins it before the socket is closed, never the other way round.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

# How long each wait in accept lasts before the loop looks at whether it must stop.
TURN = 0.2


class AcceptLoop:
    """Hands each connection ``listener`` accepts to ``handle`` until :meth:`close`, all
    on the loop's one thread: a ``handle`` that may block starts a thread of its own
    (``close`` waits for the loop, and so for a ``handle`` running)."""

    def __init__(
        self, listener: socket.socket, handle: Callable[[socket.socket], None], name: str
    ) -> None:
        self.listener = listener
        self._handle = handle
        self._stop = threading.Event()
        listener.settimeout(TURN)  # accepted sockets still block (socket.accept)
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._handle(conn)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.listener.close()
