"""``sand sync --listen ADDR``: ``POST /hooks/git`` pokes the sync to fetch now.

A push webhook is authenticated the ways forges send one, with a shared secret read
from a 0600 file (``--webhook-secret-file``):

* GitHub (and Gitea, Forgejo): ``X-Hub-Signature-256: sha256=<hex>``, the HMAC-SHA256
  of the exact request body under the secret;
* GitLab: ``X-Gitlab-Token: <secret>``, the secret itself.

Compared in constant time; anything else is refused (401) and changes nothing. An
accepted hook only wakes the sync: what it fetches and applies is what the branch
holds, never anything the request says, so a replayed or forged body gains nothing
beyond an early fetch. GitHub's events about work items (``X-GitHub-Event: issues``,
``pull_request``) wake it to run the revision in force, whose generators then read
their items from GitHub itself (docs/generators.md): the body is not read for them
either. The server is the standard library's, on a thread of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/hooks/git"
# GitHub's X-GitHub-Event names of the events that may change a generator's items.
ITEM_EVENTS = frozenset({"issues", "pull_request", "label"})
MAX_BODY = 1 << 20  # forges send a few kB; GitHub caps payloads at 25 MB, sand at 1 MiB


def signed(secret: bytes, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` carry a valid signature (GitHub) or token (GitLab)."""
    signature = headers.get("X-Hub-Signature-256")
    if signature is not None:
        scheme, _, given = signature.strip().partition("=")
        want = hmac.new(secret, body, hashlib.sha256).hexdigest()
        return scheme == "sha256" and hmac.compare_digest(given.lower().encode(), want.encode())
    token = headers.get("X-Gitlab-Token")
    if token is not None:
        return hmac.compare_digest(token.strip().encode(), secret)
    return False


class _Handler(BaseHTTPRequestHandler):
    server: HookServer
    server_version = "sand-sync"
    sys_version = ""
    timeout = 10  # seconds a connection may stall: a slow client holds one thread only

    def log_message(self, format: str, *args: object) -> None:
        return None  # the request line is not sand's to print; outcomes are reported

    def _answer(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(405 if self.path == PATH else 404, "POST only" if self.path == PATH else "")

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != PATH:
            self._answer(404, "not found")
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._answer(411, "a Content-Length is required")
            return
        if not 0 <= length <= MAX_BODY:
            self._answer(413, "too large")
            return
        body = self.rfile.read(length)
        headers = {k: v for k, v in self.headers.items()}
        if not signed(self.server.secret, body, headers):
            self.server.on_refused(self.client_address[0])
            self._answer(401, "bad or missing signature")
            return
        if self.headers.get("X-GitHub-Event", "") in ITEM_EVENTS:
            self.server.on_item()
            self._answer(202, "reading work items")
            return
        self.server.on_poke()
        self._answer(202, "fetching")


class HookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        secret: bytes,
        on_poke: Callable[[], None],
        on_refused: Callable[[str], None],
        on_item: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.secret = secret
        self.on_poke = on_poke
        self.on_item = on_item or on_poke
        self.on_refused = on_refused
        self._thread = threading.Thread(target=self.serve_forever, name="sand-hooks", daemon=True)

    def start(self) -> HookServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``); a bare ``:PORT`` is 127.0.0.1, this host only."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)
