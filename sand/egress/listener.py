"""Proxmox guests' egress proxy: one long-lived process per project and backend.

It listens where the backend's ``egress_proxy`` says (the PVE firewall lets each VM
with a ``domains`` policy reach that address and port, and nothing else but its
``cidrs``), and serves each connection in a thread of its own as Lima's per-connection
proxy does (``sand.egress.proxy``: ``CONNECT`` and absolute-form HTTP, the same
decision, each denial in the VM's ``denied.jsonl`` and the audit trail), once the
request's ``Proxy-Authorization`` and source address name one VM
(``sand.egress.registry.vouched``). A request nobody vouches for is answered 407 and
recorded in ``refused.jsonl`` beside it.

Usage: ``python -m sand.egress.listener PROJECT BACKEND ADDRESS PORT`` (started by
apply, ``sand.egress.registry.ensure_running``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import struct
import sys
import time
from pathlib import Path
from types import FrameType

from sand.egress.proxy import Refused, answer, read_head, serve_request
from sand.egress.registry import proxy_dir, vouched

AUTHORIZATION = b"proxy-authorization:"
# A guest that opens a connection and sends nothing holds a thread no longer than this.
HEAD_TIMEOUT = 30.0


def authorization_of(head: bytes) -> str:
    """The request's ``Proxy-Authorization`` value, or ""."""
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        if line.lower().startswith(AUTHORIZATION):
            return line[len(AUTHORIZATION) :].decode("latin-1").strip()
    return ""


def _note_refused(directory: Path, peer: str, head: bytes) -> None:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")[:200]
    entry = {"time": time.time(), "source": peer, "request": line, "reason": "no VM vouched"}
    with contextlib.suppress(OSError):
        fd = os.open(directory / "refused.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), 0)


def handle(directory: Path, conn: socket.socket, peer: str) -> None:
    """One connection, from ``peer``."""
    fd = conn.fileno()
    # The proxy's code reads the raw descriptor, which must stay blocking (a socket
    # timeout would make it non-blocking): the kernel's receive timeout bounds the wait.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(HEAD_TIMEOUT))
    try:
        head = read_head(fd)
    except (Refused, OSError) as exc:
        answer(fd, fd, "400 Bad Request", f"sand egress proxy: {exc}")
        return
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0))
    policy = vouched(directory, authorization_of(head), peer)
    if policy is None:
        _note_refused(directory, peer, head)
        answer(
            fd,
            fd,
            "407 Proxy Authentication Required",
            "sand egress proxy: no VM's credential from this address",
        )
        return
    serve_request(policy, head, fd, fd)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    directory: Path


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            handle(self.server.directory, self.request, str(self.client_address[0]))


def main(project: str, backend: str, address: str, port: int) -> int:
    directory = proxy_dir(project, backend)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    server = _Server((address, port), _Handler)
    server.directory = directory
    run = directory / "run.json"

    def stop(signum: int, frame: FrameType | None) -> None:
        # The port closed before the record goes: whoever waits for the record to go
        # (registry.stop) may bind the port again, or count on it refusing, at once.
        server.socket.close()
        with contextlib.suppress(FileNotFoundError):
            run.unlink()
        os._exit(0)  # the threads relaying bytes end with the process

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    listen = f"{address}:{server.server_address[1]}"
    tmp = run.with_name(f".run.{os.getpid()}")
    tmp.write_text(json.dumps({"pid": os.getpid(), "listen": listen}))
    os.replace(tmp, run)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5 or not sys.argv[4].isdigit():
        sys.stderr.write("usage: python -m sand.egress.listener PROJECT BACKEND ADDRESS PORT\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
