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

Any other request is a plain HTTP one (``api`` decides it): the GitHub API of the
declared repositories, or a declared host, forwarded with the token attached and
refused otherwise with a JSON ``{"message": "sand broker: ..."}`` (GitHub's shape
of an error, which its clients print).
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
from sand.broker import api
from sand.broker.api import Refused
from sand.broker.pktline import PktLineError, default_branch, read_commands, refusal
from sand.broker.store import VMGrants, credential_hash, read_grants
from sand.desired.brokered import BrokerGrant
from sand.errors import StateError
from sand.manifest.broker import BrokerRules, push_allowed, repo_key

SERVICES = ("git-upload-pack", "git-receive-pack")
# Request headers git's smart HTTP needs upstream; nothing else of the guest's goes on.
FORWARDED = ("Content-Type", "Accept", "Git-Protocol", "Content-Encoding", "User-Agent")
RETURNED = ("Content-Type", "Cache-Control", "Expires", "Pragma", "Content-Encoding")
# What a plain HTTP request or its answer never carries across the broker: the
# guest's credential, the connection's own headers (the broker makes its own).
NOT_RELAYED = {
    "authorization",
    "proxy-authorization",
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
    "proxy-connection",
}
# An answer's: its length is the upstream's; its Server and Date are the broker's own.
NOT_RETURNED = (NOT_RELAYED - {"content-length"}) | {"server", "date"}
UPSTREAM_TIMEOUT = 300.0
MAX_BODY = 2 << 30


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

    def _handle(self) -> None:
        state = self.server.state
        op: dict[str, object] = {"vm": "", "repository": "", "service": ""}
        try:
            route = self._route()
            if route is None:
                self._plain_http(op)
                return
            host, repo, service, suffix = route
            op.update(repository=f"{host}/{repo}", service=service)
            vm, grant = self._grant(host, repo, op)
            if service == "git-receive-pack" and not grant.push:
                raise Refused(403, f"{vm} may fetch {host}/{repo} but push nothing to it")
            token = self._token(grant)
            body = self._body() if self.command == "POST" else b""
            if self.command == "POST" and service == "git-receive-pack":
                refused = self._push_refusal(host, repo, grant, token, body, op)
                if refused is not None:
                    self._send(200, refused, "application/x-git-receive-pack-result")
                    return
            if self.command == "POST":
                state.record(**op, allowed=True)
            headers = {n: self.headers[n] for n in FORWARDED if self.headers.get(n)}
            self._relay(host, f"/{repo}/{suffix}", headers | _auth(token), body, RETURNED)
        except Refused as exc:
            if exc.status != 401:
                state.record(**op, allowed=False, reason=str(exc))
            if exc.plain:
                self._send(exc.status, f"sand broker: {exc}\n".encode(), "text/plain")
            else:
                said = json.dumps({"message": f"sand broker: {exc}"}).encode() + b"\n"
                self._send(exc.status, said, "application/json")

    # git's smart HTTP is GET and POST; an API client's requests are any of these.
    do_GET = do_POST = do_HEAD = do_PUT = do_PATCH = do_DELETE = _handle

    def _plain_http(self, op: dict[str, object]) -> None:
        """A request other than git's: the GitHub API of a declared repository for
        an operation the grant names, or a declared host; refused otherwise."""
        path, mark, query = self.path.partition("?")
        host, _, rest = path.lstrip("/").partition("/")
        host = host.lower()
        target = api.api_target(host, rest)
        service = "https" if target is None else "api"
        op.update(repository=host, service=service, method=self.command, path=f"/{rest}")
        try:
            vm, entry = self._vm(op)
            if problem := api.path_problem(rest):
                raise Refused(403, problem)
            if target is not None:
                said = api.api_request(self.command, target)
                op.update(said)
                grant = api.api_grant(vm, entry.grants, said)
            else:
                grant = api.host_grant(vm, entry.grants, host)
            headers = api.credential_header(grant, self._token(grant), target is not None)
            body = self._body()
            if op.get("operation") == "pull-request":
                owner = str(op["repository"]).split("/")[1]
                if problem := api.pull_request_problem(body, owner, grant.push):
                    raise Refused(403, problem)
            self.server.state.record(**op, allowed=True)
            # The guest's own spelling of the credential's header never goes alongside it.
            dropped = NOT_RELAYED | {name.lower() for name in headers}
            relayed = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
            self._relay(host, f"/{rest}{mark}{query}", relayed | headers, body, None, target)
        except Refused as exc:
            raise Refused(exc.status, str(exc), plain=False) from None

    def _token(self, grant: BrokerGrant) -> str:
        token = self.server.state.tokens.get(grant.secret)
        if token is None:
            raise Refused(
                503,
                f"the broker holds no token for {grant.secret} (it restarted since the "
                "last apply); run sand apply",
            )
        if "\r" in token or "\n" in token:
            raise Refused(502, f"the value of {grant.secret} is not a single line")
        return token

    def _route(self) -> tuple[str, str, str, str] | None:
        path, _, query = self.path.partition("?")
        host, _, rest = path.lstrip("/").partition("/")
        for service in SERVICES:
            if self.command == "POST" and rest.endswith("/" + service):
                return host, rest[: -len(service) - 1], service, service
        asked = parse_qs(query).get("service", [""])[0]
        if self.command == "GET" and rest.endswith("/info/refs") and asked in SERVICES:
            return host, rest[: -len("/info/refs")], asked, f"info/refs?service={asked}"
        return None

    def _vm(self, op: dict[str, object]) -> tuple[str, VMGrants]:
        """The VM whose broker credential the request carries: git's basic-auth
        password, or an API client's ``Bearer``/``token``."""
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        credential = ""
        if scheme.lower() == "basic":
            try:
                credential = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                credential = ""
            credential = credential.partition(":")[2]
        elif scheme.lower() in ("bearer", "token"):
            credential = value.strip()
        found = self.server.state.vm_for(credential, self.client_address[0])
        if found is None:
            raise Refused(401, "a VM's broker credential is needed")
        op["vm"] = found[0]
        return found

    def _grant(self, host: str, repo: str, op: dict[str, object]) -> tuple[str, BrokerGrant]:
        vm, entry = self._vm(op)
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

    def _relay(
        self,
        host: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        returned: tuple[str, ...] | None,
        target: tuple[str, str] | None = None,
    ) -> None:
        """The request upstream over HTTPS, its answer back: the ``returned``
        headers, or (None) all but the connection's own, links pointing back here."""
        conn = self._connect(host)
        try:
            try:
                conn.request(self.command, path, body=body or None, headers=headers)
                reply = conn.getresponse()
            except ssl.SSLCertVerificationError as exc:
                raise Refused(502, f"{host}'s certificate: {exc.verify_message}") from None
            except (OSError, http.client.HTTPException) as exc:
                raise Refused(502, f"{host} did not answer ({type(exc).__name__})") from None
            if reply.status == 401:
                raise Refused(502, f"{host} refused the brokered token")
            self.send_response(reply.status)
            if returned is None:
                here = f"http://{self.headers.get('Host', '')}/{host}/"
                for name, value in reply.getheaders():
                    if name.lower() not in NOT_RETURNED:
                        # Pages of a listing link upstream; the guest follows them here.
                        if target is not None and name.lower() == "link":
                            value = api.own_links(value, host, path, target[1])
                        self.send_header(name, value.replace(f"https://{host}/", here))
            for name in returned or ():
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
