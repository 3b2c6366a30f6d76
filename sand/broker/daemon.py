"""The broker process: one per project, started by an apply, outliving it.

Agents push for hours after ``sand apply`` returned, so the broker is its own
process (``python -m sand.broker PROJECT``), in its own session, holding nothing
of the apply's: its environment is the few variables it needs (never a secret
source's), its argv the project's name. It listens on the addresses the project's
guests reach it at (one listener each, added when an apply asks), answers applies
on a unix socket in the project's private state directory, and keeps the token
values they hand it in memory only. It stops when an apply tells it no VM needs
it any more, or on SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

from sand.broker.server import BrokerServer, BrokerState
from sand.broker.store import CONTROL, Running, broker_dir, control_address, write_running

MAX_MESSAGE = 4 << 20


class Broker:
    def __init__(self, directory: Path, project: str = "") -> None:
        self.directory = directory
        self.state = BrokerState(directory, project)
        self.servers: dict[str, BrokerServer] = {}
        self.stopping = threading.Event()

    def listen(self, address: str) -> int:
        if address not in self.servers:
            server = BrokerServer((address, 0), self.state)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers[address] = server
            self._publish()
        return int(self.servers[address].server_address[1])

    def _publish(self) -> None:
        ports = {a: int(s.server_address[1]) for a, s in self.servers.items()}
        write_running(self.directory, Running(os.getpid(), ports))

    def answer(self, message: dict[str, object]) -> dict[str, object]:
        """One apply's request: listen on an address, take token values, re-read the
        grants, stop."""
        reply: dict[str, object] = {"ok": True}
        if isinstance(address := message.get("listen"), str):
            reply["port"] = self.listen(address)
        tokens = message.get("tokens")
        if isinstance(tokens, dict):
            with self.state.lock:
                self.state.tokens.update({str(k): str(v) for k, v in tokens.items()})
        if message.get("reload"):
            self.state.reload()
        if message.get("stop"):
            self.stopping.set()
        return reply

    def serve(self) -> None:
        path = self.directory / CONTROL
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)  # the socket is the apply's door: this user's only
        try:
            with control_address(self.directory) as address:
                control.bind(address)
        finally:
            os.umask(old)
        control.listen()
        control.settimeout(0.5)  # to notice a stop asked by a signal
        self._publish()
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = control.accept()
                except TimeoutError:
                    continue
                with conn:
                    self._converse(conn)
        finally:
            control.close()
            for server in self.servers.values():
                server.shutdown()
                server.server_close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            with contextlib.suppress(FileNotFoundError):
                (self.directory / "run.json").unlink()

    def _converse(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        data = b""
        try:
            while len(data) <= MAX_MESSAGE and (chunk := conn.recv(1 << 16)):
                data += chunk
            reply = self.answer(json.loads(data))
        except (OSError, ValueError) as exc:
            reply = {"ok": False, "error": type(exc).__name__}
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(reply).encode())


def main(project: str) -> int:
    broker = Broker(broker_dir(project), project)

    def stop(signum: int, frame: FrameType | None) -> None:
        broker.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    broker.serve()
    return 0
