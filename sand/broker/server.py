"""The broker's HTTP side: git's smart HTTP from guests, forwarded with the real token.

A guest's git reaches ``http://<broker>/<host[:port]>/<repository path>/...`` (its
``url.insteadOf`` points there) with its VM's broker credential as the basic-auth
password. The broker finds the VM by that credential (and, where the backend's
guests come from their own address, by that address too), the grant whose
repositories hold the one asked for, and the rules of that grant: a fetch
(``git-upload-pack``) of a declared repository is forwarded; a push
(``git-receive-pack``) is read first and forwarded only when every ref it updates
is a branch its patterns allow. The real token is added to the forwarded request
alone, over HTTPS. Every refusal is said in words git shows the agent: an HTTP 403
with a plain-text body at discovery (git prints it as ``remote: ...``), or
receive-pack's own ``ng <ref> <reason>`` report for a refused branch.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import http.client
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

from sand.audit import trail
from sand.broker.pktline import PktLineError, default_branch, read_commands, refusal
from sand.broker.store import VMGrants, credential_hash, read_grants
from sand.desired.brokered import BrokerGrant
from sand.errors import StateError
from sand.manifest.broker import BrokerRules, push_allowed, repo_key

SERVICES = ("git-upload-pack", "git-receive-pack")
# Request headers git's smart HTTP needs upstream; nothing else of the guest's goes on.
FORWARDED = ("Content-Type", "Accept", "Git-Protocol", "Content-Encoding", "User-Agent")
RETURNED = ("Content-Type", "Cache-Control", "Expires", "Pragma", "Content-Encoding")
UPSTREAM_TIMEOUT = 300.0
MAX_BODY = 2 << 30


class Refused(Exception):
    """A request the broker will not forward: the status and what git shows the agent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BrokerState:
    """What the broker knows: the grants (re-read from the host state when told) and
    the token values an apply handed it (in memory only)."""

    def __init__(self, directory: Path, project: str = "") -> None:
        self.directory = directory
        self.project = project
        self.lock = threading.Lock()
        self.grants: dict[str, VMGrants] = {}
        self.tokens: dict[str, str] = {}
        self.reload()

    def reload(self) -> None:
        grants = read_grants(self.directory)
        with self.lock:
            self.grants = grants

    def vm_for(self, credential: str, address: str) -> tuple[str, VMGrants] | None:
        wanted = credential_hash(credential)
        with self.lock:
            for vm, entry in self.grants.items():
                if hmac.compare_digest(entry.credential, wanted):
                    return (vm, entry) if entry.source in ("", address) else None
        return None

    def record(self, **operation: object) -> None:
        """The operation in the broker's own log and in the host's audit trail
        (``sand.audit``): an allowed one that cannot be recorded there is not forwarded."""
        line = json.dumps({"ts": round(time.time(), 3), **operation}, sort_keys=True)
        with self.lock, open(self.directory / "operations.jsonl", "a", encoding="utf-8") as log:
            log.write(line + "\n")
        try:
            trail.record("broker.operation", project=self.project, **operation)
        except StateError as exc:
            if operation.get("allowed"):
                raise Refused(503, f"the broker cannot record this operation: {exc}") from exc


class _Handler(BaseHTTPRequestHandler):
    server: BrokerServer
    # One request per connection: a forwarded response streams until the close.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        return  # the request line is not logged: operations.jsonl says what happened

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        state = self.server.state
        op: dict[str, object] = {"vm": "", "repository": "", "service": ""}
        try:
            host, repo, service, suffix = self._route()
            op.update(repository=f"{host}/{repo}", service=service)
            vm, grant = self._grant(host, repo, op)
            if service == "git-receive-pack" and not grant.push:
                raise Refused(403, f"{vm} may fetch {host}/{repo} but push nothing to it")
            token = state.tokens.get(grant.secret)
            if token is None:
                raise Refused(
                    503,
                    f"the broker holds no token for {grant.secret} (it restarted since the "
                    "last apply); run sand apply",
                )
            body = self._body() if self.command == "POST" else b""
            if self.command == "POST" and service == "git-receive-pack":
                refused = self._push_refusal(host, repo, grant, token, body, op)
                if refused is not None:
                    self._send(200, refused, "application/x-git-receive-pack-result")
                    return
            if self.command == "POST":
                state.record(**op, allowed=True)
            self._forward(host, f"/{repo}/{suffix}", token, body)
        except Refused as exc:
            if exc.status != 401:
                state.record(**op, allowed=False, reason=str(exc))
            self._send(exc.status, f"sand broker: {exc}\n".encode(), "text/plain")

    def _route(self) -> tuple[str, str, str, str]:
        path, _, query = self.path.partition("?")
        host, _, rest = path.lstrip("/").partition("/")
        for service in SERVICES:
            if self.command == "POST" and rest.endswith("/" + service):
                return host, rest[: -len(service) - 1], service, service
        asked = parse_qs(query).get("service", [""])[0]
        if self.command == "GET" and rest.endswith("/info/refs") and asked in SERVICES:
            return host, rest[: -len("/info/refs")], asked, f"info/refs?service={asked}"
        raise Refused(403, "only git's smart HTTP (clone, fetch, push) goes through the broker")

    def _grant(self, host: str, repo: str, op: dict[str, object]) -> tuple[str, BrokerGrant]:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        credential = ""
        if scheme.lower() == "basic":
            try:
                credential = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                credential = ""
        found = self.server.state.vm_for(credential.partition(":")[2], self.client_address[0])
        if found is None:
            raise Refused(401, "a VM's broker credential is needed")
        vm, entry = found
        op["vm"] = vm
        key = repo_key(f"https://{host}/{repo}")
        for grant in entry.grants:
            if key in {repo_key(r) for r in grant.repositories}:
                return vm, grant
        raise Refused(403, f"{vm} may not reach {host}/{repo}: no brokered secret of its allows it")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, size = [], 0
            while (length := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                size += length
                if size > MAX_BODY:
                    raise Refused(413, "the request is larger than the broker takes")
                chunks.append(self.rfile.read(length))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise Refused(413, "the request is larger than the broker takes")
        return self.rfile.read(length) if length else b""

    def _push_refusal(
        self,
        host: str,
        repo: str,
        grant: BrokerGrant,
        token: str,
        body: bytes,
        op: dict[str, object],
    ) -> bytes | None:
        """receive-pack's report refusing the push, or None when every ref may move."""
        commands = gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
        try:
            updates, capabilities = read_commands(commands)
        except PktLineError as exc:
            raise Refused(400, str(exc)) from None
        op["refs"] = [u.ref for u in updates]
        rules = BrokerRules(repositories=list(grant.repositories), push=list(grant.push))
        default = self._default_branch(host, repo, token)
        reasons = {}
        allowed = ", ".join(grant.push)
        for u in updates:
            branch = u.ref.removeprefix("refs/heads/")
            if branch == u.ref:
                reasons[u.ref] = "sand broker: only branches are pushed through the broker"
            elif branch == default and not push_allowed(rules, branch, default):
                reasons[u.ref] = (
                    f"sand broker: {branch} is the default branch, pushed only where "
                    f"{grant.secret}'s rules name it (they allow: {allowed})"
                )
            elif not push_allowed(rules, branch, default):
                reasons[u.ref] = (
                    f"sand broker: {branch} is not among the branches {grant.secret} may "
                    f"push ({allowed})"
                )
        if not reasons:
            return None
        said = "sand broker: push refused: " + "; ".join(
            r.removeprefix("sand broker: ") for r in sorted(set(reasons.values()))
        )
        self.server.state.record(**op, allowed=False, reason=said)
        return refusal(updates, reasons, capabilities, said)

    def _default_branch(self, host: str, repo: str, token: str) -> str | None:
        """What the repository's HEAD names, asked of it: never pushed by a pattern."""
        conn = self._connect(host)
        try:
            conn.request("GET", f"/{repo}/info/refs?service=git-upload-pack", headers=_auth(token))
            reply = conn.getresponse()
            if reply.status != 200:
                raise Refused(502, f"{host}/{repo} did not say its default branch ({reply.status})")
            return default_branch(reply.read())
        finally:
            conn.close()

    def _forward(self, host: str, path: str, token: str, body: bytes) -> None:
        headers = {name: self.headers[name] for name in FORWARDED if self.headers.get(name)}
        conn = self._connect(host)
        try:
            conn.request(self.command, path, body=body or None, headers=headers | _auth(token))
            reply = conn.getresponse()
            if reply.status == 401:
                raise Refused(502, f"{host} refused the brokered token")
            self.send_response(reply.status)
            for name in RETURNED:
                if reply.getheader(name):
                    self.send_header(name, reply.getheader(name, ""))
            self.end_headers()
            while chunk := reply.read(1 << 16):
                self.wfile.write(chunk)
        finally:
            conn.close()

    def _connect(self, host: str) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(host, timeout=UPSTREAM_TIMEOUT, context=self.server.tls)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="sand broker"')
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _auth(token: str) -> dict[str, str]:
    # GitHub's form for a token over HTTPS; servers that take a token as a password
    # ignore the user name.
    pair = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


class BrokerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: BrokerState) -> None:
        super().__init__(address, _Handler)
        self.state = state
        # The system's trust store (SSL_CERT_FILE and SSL_CERT_DIR honoured): the
        # upstream's certificate is checked as git itself would.
        self.tls = ssl.create_default_context()
