"""The host-side egress proxy of a VM: one process per connection the guest opens.

QEMU's user-mode network runs it for each TCP connection the guest makes to the
proxy's address (``guestfwd=...-cmd:``, libslirp's ``fork_exec``): its stdin and stdout
are that connection. It speaks HTTP proxying, ``CONNECT host:port`` (HTTPS, git, any
TCP) and a plain-HTTP request in absolute form (``GET http://host/path``), decides the
destination by the VM's policy file (``sand.egress.policy.decide``), and then either
relays bytes both ways or answers 403 and logs the denial on the host: one JSON line
in the VM's denial log (VM, destination, time, why) and one ``egress.denied`` record in
the audit trail.

Usage: ``python -m sand.egress.proxy POLICY_FILE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from sand.audit import trail
from sand.egress.policy import PolicyFile, decide, read_policy
from sand.errors import StateError

# A request head larger than this is refused: a proxy request is a line and a few headers.
MAX_HEAD = 16384
CONNECT_TIMEOUT = 15.0
CHUNK = 65536
# How long a refused connection waits for the guest to stop sending.
DRAIN_TIMEOUT = 5.0


class Refused(Exception):
    """The request cannot be served; the message is what the guest is told."""


def read_head(fd: int) -> bytes:
    """The request's head (through the blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise Refused("request head too large")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise Refused("connection closed before a request")
        data += chunk
    return data


def parse_target(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, the request to send upstream): None for CONNECT (a tunnel), the
    request rewritten to origin form for plain HTTP."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3:
        raise Refused("malformed request line")
    method, target, version = parts
    if method.upper() == "CONNECT":
        host, sep, digits = target.rpartition(":")
        if not sep or not digits.isdigit() or not host:
            raise Refused("CONNECT takes host:port")
        return host.strip("[]"), int(digits), None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refused("only CONNECT and absolute http:// requests are proxied")
    try:
        port = url.port or 80
    except ValueError:
        raise Refused("bad port") from None
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    kept = [h for h in rest.split(b"\r\n") if not h.lower().startswith(b"proxy-")]
    request = f"{method} {path} {version}\r\n".encode("latin-1") + b"\r\n".join(kept)
    return url.hostname, port, request


def log_denial(policy: PolicyFile, host: str, port: int, reason: str) -> None:
    """The denial on the host: the VM's log and the audit trail."""
    entry = {
        "time": time.time(),
        "project": policy.project,
        "backend": policy.backend,
        "vm": policy.vm,
        "destination": f"{host}:{port}",
        "reason": reason,
    }
    path = Path(policy.denials)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    with contextlib.suppress(StateError, OSError):
        trail.record(
            "egress.denied",
            project=policy.project,
            backend=policy.backend,
            vm=policy.vm,
            destination=f"{host}:{port}",
            reason=reason,
        )


def connect(addresses: tuple[str, ...], port: int) -> socket.socket:
    last: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            last = exc
    raise Refused(f"cannot connect: {last}")


def relay(fd_in: int, fd_out: int, upstream: socket.socket) -> None:
    """Bytes both ways until both sides are done; each EOF passed on as a half close."""
    upstream.settimeout(None)
    sel = selectors.DefaultSelector()
    sel.register(fd_in, selectors.EVENT_READ, "guest")
    sel.register(upstream, selectors.EVENT_READ, "upstream")
    open_sides = 2
    while open_sides:
        for key, _ in sel.select():
            if key.data == "guest":
                data = os.read(fd_in, CHUNK)
                if data:
                    upstream.sendall(data)
                    continue
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)
                sel.unregister(fd_in)
            else:
                try:
                    data = upstream.recv(CHUNK)
                except OSError:
                    data = b""
                if data:
                    _write_all(fd_out, data)
                    continue
                _half_close(fd_out)
                sel.unregister(upstream)
            open_sides -= 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _half_close(fd: int) -> None:
    """End the guest's side for writing: a socket (as slirp gives) is shut down, a pipe
    closed."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        with contextlib.suppress(OSError):
            os.close(fd)
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    sock.close()


def answer(fd_in: int, fd_out: int, status: str, why: str = "") -> None:
    """A refusal, then the connection closed cleanly: the guest's side half closed and
    what it still sends read and dropped (closing with unread bytes would reset it
    before the answer is read)."""
    body = (why + "\n").encode() if why else b""
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        _write_all(fd_out, head.encode() + body)
        _half_close(fd_out)
        sel = selectors.DefaultSelector()
        sel.register(fd_in, selectors.EVENT_READ)
        while sel.select(DRAIN_TIMEOUT) and os.read(fd_in, CHUNK):
            pass


def serve(policy_path: Path, fd_in: int = 0, fd_out: int = 1) -> int:
    """One connection: read its request, decide, relay or refuse."""
    try:
        policy = read_policy(policy_path)
    except ValueError:
        answer(fd_in, fd_out, "403 Forbidden", "sand: this VM's egress policy is unreadable")
        return 0
    try:
        head = read_head(fd_in)
    except Refused as exc:
        answer(fd_in, fd_out, "400 Bad Request", f"sand egress proxy: {exc}")
        return 0
    return serve_request(policy, head, fd_in, fd_out)


def serve_request(policy: PolicyFile, head: bytes, fd_in: int, fd_out: int) -> int:
    """One request whose head (and what followed it) was read, for a VM whose policy is
    ``policy``: decide, then relay or refuse."""
    try:
        header_end = head.index(b"\r\n\r\n") + 4
        host, port, request = parse_target(head[:header_end])
    except Refused as exc:
        answer(fd_in, fd_out, "400 Bad Request", f"sand egress proxy: {exc}")
        return 0
    verdict = decide(policy, host, port)
    if not verdict.allowed:
        log_denial(policy, host, port, verdict.reason)
        answer(
            fd_in, fd_out, "403 Forbidden", f"sand egress: {host}:{port} denied: {verdict.reason}"
        )
        return 0
    try:
        upstream = connect(verdict.addresses, port)
    except Refused as exc:
        answer(fd_in, fd_out, "502 Bad Gateway", f"sand egress proxy: {exc}")
        return 0
    with upstream:
        if request is None:
            _write_all(fd_out, b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream.sendall(request)
        if extra := head[header_end:]:
            upstream.sendall(extra)
        relay(fd_in, fd_out, upstream)
    return 0


def command(argv: list[str], module: str, serve_one: Callable[[Path], int]) -> int:
    """A per-connection program's command line: its one argument, the policy file."""
    if len(argv) != 2:
        sys.stderr.write(f"usage: python -m {module} POLICY_FILE\n")
        return 2
    return serve_one(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(command(sys.argv, "sand.egress.proxy", serve))
