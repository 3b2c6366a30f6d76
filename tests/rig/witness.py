"""Witness: listeners at the destinations a guest must not reach, each noting who reached it.

A probe that times out proves nothing unless something was listening where it aimed: a
witness listens (TCP: accepts, UDP: reads) at each such address and port, so a test
asserts both sides -- the guest's attempt failed, and nothing from the guest arrived.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Witness:
    def __init__(self) -> None:
        self.arrived: list[tuple[str, str, int, str]] = []  # (proto, address, port, peer)
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def listen(self, proto: str, address: str, port: int, scope: int = 0) -> None:
        """Listen on ``address`` (IPv4 or IPv6; ``scope``: a link-local's interface index)."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        sock = socket.socket(family, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port, 0, scope) if family == socket.AF_INET6 else (address, port))
        if kind == socket.SOCK_STREAM:
            sock.listen(16)
        sock.settimeout(0.2)
        self._socks.append(sock)
        loop = self._accept if kind == socket.SOCK_STREAM else self._read
        thread = threading.Thread(target=loop, args=(sock, proto, address, port), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, sock: socket.socket, proto: str, address: str, port: int) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = sock.accept()
            except OSError:
                continue
            self.arrived.append((proto, address, port, str(peer[0])))
            conn.close()

    def _read(self, sock: socket.socket, proto: str, address: str, port: int) -> None:
        while not self._stop.is_set():
            try:
                _data, peer = sock.recvfrom(4096)
            except OSError:
                continue
            self.arrived.append((proto, address, port, str(peer[0])))

    def at(self, address: str, port: int) -> list[str]:
        """The peers that reached ``address``:``port``."""
        return [peer for _p, a, p, peer in self.arrived if (a, p) == (address, port)]

    def __enter__(self) -> Witness:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # Each thread out of its accept or read first: a socket closed while a thread
        # still waits in one stays bound until it returns, and the next test's witness
        # at the same address then fails to bind (EADDRINUSE).
        for thread in self._threads:
            thread.join()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.close()
