"""A closed SlowDoor leaves nothing that could take a later test's connections.

Seen in CI: after tests/e2e/test_slow_guest_patience.py, a publish test on the same
worker read ``SSH-2.0-OpenSSH...`` from its forge stand-in. The door had closed its
listener while its own thread waited in accept; that wait, restarted by the kernel
after a signal, accepted on the descriptor number the forge's listener had taken
since, and joined the forge's client to a guest's sshd.
"""

from __future__ import annotations

import select
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.acceptloop import AcceptLoop
from tests.rig.slowdoor import SlowDoor

BANNER = b"SSH-2.0-OpenSSH_stand-in\r\n"


@pytest.fixture
def sshd() -> Iterator[tuple[str, int]]:
    """Where the door leads: a listener that greets each connection as sshd does."""

    def greet(conn: socket.socket) -> None:
        with conn:
            conn.sendall(BANNER)

    server = AcceptLoop(socket.create_server(("127.0.0.1", 0)), greet, "sshd-stand-in")
    yield server.listener.getsockname()
    server.close()


def _waiting_in_a_call_on(thread: threading.Thread, fd: int) -> bool:
    """Whether ``thread`` is blocked in a system call whose first argument is ``fd``
    (an accept on it)."""
    assert thread.native_id is not None
    fields = Path(f"/proc/self/task/{thread.native_id}/syscall").read_text().split()
    return len(fields) > 1 and fields[0] != "running" and int(fields[1], 16) == fd


def test_a_closed_door_leaves_no_listener_to_take_the_next_servers_connections(sshd):
    before = set(threading.enumerate())
    door = SlowDoor(sshd)
    (acceptor,) = set(threading.enumerate()) - before
    fd, port = door.listener.fileno(), door.port
    if door.listener.gettimeout() is None:
        # A blocking accept: close it while the thread is inside, as a test's end does.
        deadline = time.monotonic() + 30
        while not _waiting_in_a_call_on(acceptor, fd):
            assert time.monotonic() < deadline, "the door's thread never reached accept"
            time.sleep(0.01)
    door.close()

    # The next test's server takes the closed listener's descriptor number (blocking,
    # as an http.server's is: a restarted accept waits on it).
    server = socket.create_server(("127.0.0.1", 0))
    assert server.fileno() == fd, "the scene needs the number back; something took it"
    with server:
        if acceptor.is_alive():
            # A signal whose handler asks for restarted calls: an accept it interrupts
            # starts again on the same number.
            handled = threading.Event()
            previous = signal.signal(signal.SIGUSR1, lambda *_: handled.set())
            signal.siginterrupt(signal.SIGUSR1, False)
            try:
                signal.pthread_kill(acceptor.ident or 0, signal.SIGUSR1)
                while not handled.wait(0.01):  # Python runs the handler between bytecodes
                    pass
            finally:
                signal.signal(signal.SIGUSR1, previous)
        with socket.create_connection(server.getsockname(), timeout=30):
            assert select.select([server], [], [], 10)[0], "the connection never came"
            server.setblocking(False)
            conn, _ = server.accept()  # the server's own connection, not the door's
            conn.close()
    assert not acceptor.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=30).close()
