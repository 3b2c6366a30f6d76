"""SlowDoor: a TCP door on 127.0.0.1 to a guest's sshd that plays a slow guest.

``refuse_for`` resets every connection for that long after the first one the door
sees (sshd not up yet); ``hold`` keeps each admitted connection silent that long
before joining it to sshd (a loaded guest's handshake). Times are the world's
seconds times ``scale`` (sand's own patience runs scaled alike).

``close`` leaves nothing behind: no thread, no listener, no connection (see
:mod:`tests.rig.acceptloop` for what a listener closed under its own accept did).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

from tests.rig.acceptloop import AcceptLoop


class SlowDoor:
    def __init__(self, upstream: tuple[str, int], scale: float = 1.0) -> None:
        self.upstream = upstream
        self.scale = scale
        self.refuse_for = 0.0
        self.hold = 0.0
        self.first_try: float | None = None
        self.resets = 0
        self.admitted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._timers: list[threading.Timer] = []
        self._pipes: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._acceptor = AcceptLoop(self.listener, self._admit, "slow-door")

    def behave(self, *, refuse_for: float = 0.0, hold: float = 0.0) -> None:
        self.refuse_for, self.hold, self.first_try = refuse_for, hold, None

    def _admit(self, conn: socket.socket) -> None:
        now = time.monotonic()
        if self.first_try is None:
            self.first_try = now
        if now - self.first_try < self.refuse_for * self.scale:
            self.resets += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # a reset, as a guest without sshd yet answers
            return
        self.admitted += 1
        # The guest's slowness itself: the connection is joined to sshd that much later.
        with self._lock:
            if self._closing.is_set():
                conn.close()
                return
            self._conns.append(conn)
            timer = threading.Timer(self.hold * self.scale, self._join, (conn,))
            self._timers.append(timer)
            timer.start()

    def _join(self, conn: socket.socket) -> None:
        try:
            up = socket.create_connection(self.upstream)
        except OSError:
            return  # conn is closed with the door
        with self._lock:
            if self._closing.is_set():
                up.close()
                return
            self._conns.append(up)
            for a, b in ((conn, up), (up, conn)):
                pipe = threading.Thread(target=_pipe, args=(a, b), daemon=True)
                self._pipes.append(pipe)
                pipe.start()

    def close(self) -> None:
        self._closing.set()
        self._acceptor.close()
        with self._lock:
            timers, pipes, conns = list(self._timers), list(self._pipes), list(self._conns)
        for timer in timers:
            timer.cancel()
            timer.join()
        for conn in conns:  # wakes each pipe's recv: every one ends
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for pipe in pipes:
            pipe.join()
        for conn in conns:
            conn.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
