"""Running a per-connection program (the proxy, the relay) as libslirp's ``fork_exec``
does: its stdin and stdout one end of a socket pair, the test holding the other."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def on_a_connection(
    module: str, policy: Path, request: bytes, then: bytes = b""
) -> tuple[int, bytes]:
    """Run ``python -m MODULE POLICY`` on one connection; send ``request`` (and ``then``
    once an answer's head is back), end our side; its exit status and all it sent."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(policy)],
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
        )
        theirs.close()
        if request:
            ours.sendall(request)
        answer = b""
        while then and b"\r\n\r\n" not in answer:
            chunk = ours.recv(65536)
            if not chunk:
                break
            answer += chunk
        if then:
            ours.sendall(then)
        ours.shutdown(socket.SHUT_WR)
        while chunk := ours.recv(65536):
            answer += chunk
        return proc.wait(timeout=30), answer
