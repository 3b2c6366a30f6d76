"""A real git smart-HTTP server with token auth, for repo-clone tests.

``git http-backend`` (the CGI git itself ships) behind a small threaded
``http.server``.  Every request -- fetch and push alike -- must carry HTTP
basic auth whose password equals the token (the user name is ignored, the way
GitHub treats ``x-access-token:<token>``).

By default it listens on the test bridge's host address (10.213.0.1), so every
NetnsGuest reaches it and nothing outside the test network can; pass
``host="127.0.0.1"`` for host-only use (e.g. behind a qemu guestfwd).

The token is never logged: request_log records only the path and whether
auth succeeded, and the CGI never sees the Authorization header.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from tests.rig._util import RigError, run

# Git identity for the commits create_repo makes; fixed so repos are stable.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "sand rig",
    "GIT_AUTHOR_EMAIL": "rig@sand.invalid",
    "GIT_COMMITTER_NAME": "sand rig",
    "GIT_COMMITTER_EMAIL": "rig@sand.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}


def _exec_path() -> Path:
    return Path(run(["git", "--exec-path"]).stdout.decode().strip())


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.1: a client keeps its connection (one TLS handshake) for all of a fetch's
    # requests, as a forge lets it. Every answer is whole, with its Content-Length.
    protocol_version = "HTTP/1.1"
    # An answer is two writes (its head, then its body): with Nagle's algorithm the body
    # waited for the client's delayed ACK of the head, 40 ms a request on a kept connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        # BaseHTTPRequestHandler logs the request line to stderr; a URL with
        # embedded credentials would print them.  Log nothing.
        return

    def setup(self) -> None:
        super().setup()
        with self.server.log_lock:
            self.server.connections += 1

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        _user, sep, password = decoded.partition(":")
        return bool(sep) and hmac.compare_digest(password.encode(), self.server.token.encode())

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            # git sends large pushes chunked; http.server doesn't decode that.
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        path, _, query = self.path.partition("?")
        ok = self._authorized()
        with self.server.log_lock:
            self.server.request_log.append((path, ok))
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="sand-rig"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self._read_body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": os.fspath(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            # Authenticated: http-backend only allows receive-pack (push) when
            # REMOTE_USER is set or http.receivepack is on.
            "REMOTE_USER": "sand-rig",
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.0",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        proc = subprocess.run(
            [os.fspath(self.server.backend)],
            input=body,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        head, sep, payload = proc.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, sep, payload = proc.stdout.partition(b"\n\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        if proc.returncode != 0 and not sep:
            status, headers, payload = 500, [], b""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], token: str, root: Path) -> None:
        super().__init__(addr, _Handler)
        self.token = token
        self.root = root
        self.backend = _exec_path() / "git-http-backend"
        self.request_log: list[tuple[str, bool]] = []
        self.connections = 0  # TCP connections accepted: a kept one serves many requests
        self.log_lock = threading.Lock()


class GitServer:
    """Token-protected smart-HTTP git server serving bare repos from a temp dir."""

    def __init__(
        self,
        token: str,
        *,
        host: str | None = None,
        port: int = 0,
        tls: tuple[str, str] | None = None,
    ) -> None:
        """``tls``: (certfile, keyfile) to serve HTTPS instead of HTTP."""
        if not token:
            raise ValueError("token must be non-empty")
        self.token = token
        self._tls = tls
        self._host = host
        self._port = port
        self.root = Path(tempfile.mkdtemp(prefix="sand-rig-git-"))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        # Never the token.
        return f"GitServer(url={self.base_url!r})" if self._server else "GitServer(stopped)"

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> GitServer:
        if self._server is not None:
            return self
        host = self._host
        if host is None:
            # Imported here so host-only use doesn't need root for the bridge.
            from tests.rig.guest import ensure_bridge

            host = ensure_bridge()
        self._server = _Server((host, self._port), self.token, self.root)
        if self._tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sand-rig-git", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def address(self) -> str:
        if self._server is None:
            raise RigError("git server not started")
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        if self._server is None:
            raise RigError("git server not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self.address}:{self.port}"

    @property
    def request_log(self) -> list[tuple[str, bool]]:
        """(path, auth_ok) for every request so far, in order; a copy."""
        if self._server is None:
            return []
        with self._server.log_lock:
            return list(self._server.request_log)

    @property
    def connections(self) -> int:
        """TCP connections accepted so far (a client keeping one serves many requests)."""
        if self._server is None:
            return 0
        with self._server.log_lock:
            return self._server.connections

    def url_for(self, repo: str) -> str:
        """Clone URL for `repo` (no credentials in it)."""
        name = repo if repo.endswith(".git") else f"{repo}.git"
        return f"{self.base_url}/{name}"

    def repo_path(self, repo: str) -> Path:
        name = repo if repo.endswith(".git") else f"{repo}.git"
        return self.root / name

    def create_repo(
        self, name: str, files: Mapping[str, str | bytes] | None = None, *, branch: str = "main"
    ) -> str:
        """Create bare repo `name` with one commit holding `files` (path ->
        content) on `branch`; returns its clone URL."""
        bare = self.repo_path(name)
        if bare.exists():
            raise RigError(f"repo {name} already exists")
        run(["git", "init", "-q", "--bare", f"--initial-branch={branch}", bare], env=_GIT_ENV)
        # Pushes over HTTP must update the checked-in branch of a bare repo.
        run(["git", "-C", bare, "config", "http.receivepack", "true"], env=_GIT_ENV)
        with tempfile.TemporaryDirectory(prefix="sand-rig-seed-") as work:
            wt = Path(work)
            run(["git", "init", "-q", f"--initial-branch={branch}", wt], env=_GIT_ENV)
            for rel, content in (files or {"README.md": f"# {name}\n"}).items():
                target = wt / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, bytes):
                    target.write_bytes(content)
                else:
                    target.write_text(content)
            run(["git", "-C", wt, "add", "-A"], env=_GIT_ENV)
            run(["git", "-C", wt, "commit", "-q", "-m", "initial"], env=_GIT_ENV)
            run(
                ["git", "-C", wt, "push", "-q", os.fspath(bare), f"{branch}:{branch}"], env=_GIT_ENV
            )
        return self.url_for(name)

    def branches(self, name: str) -> dict[str, str]:
        """branch -> commit sha in the bare repo (to assert a push landed)."""
        out = run(
            [
                "git",
                "-C",
                self.repo_path(name),
                "for-each-ref",
                "--format=%(refname:short) %(objectname)",
                "refs/heads",
            ],
            env=_GIT_ENV,
        ).stdout.decode()
        pairs = (line.split(" ", 1) for line in out.splitlines() if line)
        return {ref: sha for ref, sha in pairs}
