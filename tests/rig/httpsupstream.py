"""An HTTPS server that records every request it receives: what the broker sent on.

It stands for the GitHub API (``/api/v3/repos/...``, GitHub Enterprise's form,
since it is not ``api.github.com``) and for a plain API host alike. Each request is
kept whole (method, path with its query, headers, body), so a test asserts on
what arrived upstream: the real token attached, the guest's credential not, and
nothing of what the broker refused. Its answer is JSON naming what it got, with
a ``Link`` to a next page on its own URL, by the repository's id as GitHub's are.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-case, a repeated one's values joined by ", "
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers: dict[str, str] = {}
        for name, value in self.headers.items():  # a repeated header: its values joined
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        got = Received(self.command, self.path, headers, body)
        with self.server.lock:
            self.server.received.append(got)
        status = 201 if self.command == "POST" else 200
        data = json.dumps({"method": self.command, "path": self.path}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        host, port = self.server.server_address[:2]
        # GitHub links a repository's next page by the repository's id, not its name.
        page = re.sub(r"/repos/[^/]+/[^/]+/", "/repositories/42/", self.path.partition("?")[0])
        self.send_header("Link", f'<https://{host}:{port}{page}?page=2>; rel="next"')
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: str) -> None:
        super().__init__((address, 0), _Handler)
        self.lock = threading.Lock()
        self.received: list[Received] = []


class HttpsUpstream:
    """Served on ``address`` with (certfile, keyfile) until ``stop``."""

    def __init__(self, address: str, cert: str, key: str) -> None:
        self._server = _Server(address)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        """``address:port``, as a brokered grant names it."""
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def received(self) -> list[Received]:
        with self._server.lock:
            return list(self._server.received)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
