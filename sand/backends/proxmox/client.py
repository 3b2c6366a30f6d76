"""A thin asyncio wrapper around the PVE API: retries, task polling, error mapping.

Writes go through proxmoxer (requests); reads through the standard library's HTTP
client (``plainget.py``: a plan pays no import of requests). Both are synchronous,
so every call runs in a worker thread of the client's own (``threads.py``).
Transient failures (5xx other than PVE's definite refusals, connection errors,
timeouts, lock timeouts, no quorum) are retried
with jittered exponential backoff (``sand.retrying``), each retry said to whoever
watches ("PVE 503, retry 2/5 in 1.6s"); 401/403 never are. Every error is a
:class:`ProxmoxError` naming the backend, the call and PVE's reason, and
classified here, once (``kind``: see ``errors.py``), so no caller reads PVE's text.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand import activity, clock
from sand.backends.fence import Fence
from sand.backends.proxmox import plainget
from sand.backends.proxmox.errors import (
    ErrorKind,
    ProxmoxError,
    classify_task,
    refused_connection,
    retry_reason,
    shortened,
)
from sand.backends.proxmox.failures import Failures
from sand.backends.proxmox.plainget import PlainReader
from sand.backends.proxmox.tasks import PollPolicy, TaskResult
from sand.backends.proxmox.threads import REQUESTS_AT_ONCE, RequestThreads
from sand.backends.proxmox.token import ApiToken, read_token
from sand.errors import ErrorLayer
from sand.logs import get_logger
from sand.manifest.values import hostname_problem
from sand.retrying import Backoff, retry_async
from sand.terminal import one_line

# What a segment of an API path is made of: names and ids PVE's own formats
# allow, vmids, and UPIDs ("UPID:node:…:user@realm!token:"). No '.'/'..'
# segment, no leading '-', no '%', '?' or '#': a node or pool name cannot reach
# another endpoint.
_PATH_SEGMENT = re.compile(r"^[A-Za-z0-9_@!:=+][A-Za-z0-9._@!:=+-]*$")


def _check_path(backend: str, path: str) -> None:
    segments = path.strip("/").split("/")
    if not all(_PATH_SEGMENT.match(s) for s in segments):
        raise ProxmoxError(backend, f"refusing API path {path!r}: a segment is not a PVE name")


@dataclass
class PveClient(Failures):
    backend: str
    host: str
    port: int
    token_file: Path
    verify: bool | str = True  # False, True, or a CA bundle path
    http_timeout: float = 15.0
    retry: Backoff = field(default_factory=Backoff)  # tries per request, the first included
    poll: PollPolicy = field(default_factory=PollPolicy)
    requests: int = 0  # API requests sent (attempts included)
    at_once: int = REQUESTS_AT_ONCE  # requests in flight at most (threads, connections)
    warnings: list[str] = field(default_factory=list)  # task WARNINGS, newest last
    # The clock task waits read and sleep on: a test of the poll cadence hands in a
    # fake one, so it proves the schedule without waiting for it.
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def __post_init__(self) -> None:
        # The manifest refuses these at validate time; a client built any other
        # way must not be able to aim the token at another host or API path.
        problem = hostname_problem(self.host)
        if problem:
            raise ProxmoxError(self.backend, f"refusing host: {problem}")
        self._api: Any = None
        self._plain: PlainReader | None = None
        self._early: dict[tuple[str, str, str], Future[Any]] = {}
        self._token: ApiToken | None = None
        self._init_lock = threading.Lock()
        self._threads = RequestThreads(self.at_once)
        # Every request passes it, in the thread that sends it, just before: a request
        # queued for a thread before a pause is checked after it.
        self.fence = Fence(self.backend)
        self.reached = False  # PVE answered at least once (a refusal then is a restart)

    def __repr__(self) -> str:
        return f"PveClient({self.backend}, https://{self.host}:{self.port})"

    # --- plumbing ---------------------------------------------------------------

    def _read_token(self) -> ApiToken:
        with self._init_lock:
            if self._token is None:
                self._token = read_token(self.token_file, self.backend)
            return self._token

    def _connect(self) -> Any:
        # Imported by the first write (requests and urllib3 are most of it): a
        # command that only reads (a plan) does not pay for them (plainget.py).
        import proxmoxer
        from requests.adapters import HTTPAdapter

        token = self._read_token()
        with self._init_lock:
            if self._api is None:
                api = proxmoxer.ProxmoxAPI(
                    self.host,
                    port=self.port,
                    user=token.user,
                    token_name=token.token_name,
                    token_value=token.secret,
                    verify_ssl=self.verify,
                    timeout=clock.real(self.http_timeout),
                    service="PVE",
                )
                # As many connections kept as requests in flight (sand.backends.proxmox.threads).
                api._store["session"].mount("https://", HTTPAdapter(pool_maxsize=self.at_once))
                self._api = api
            return self._api

    @property
    def token(self) -> ApiToken:
        return self._read_token()

    def _reader(self) -> PlainReader | None:
        """The standard-library reader of GETs; None when requests must carry them."""
        if not plainget.serves():
            return None
        with self._init_lock:
            if self._plain is None or (self._plain.host, self._plain.port) != (
                self.host,
                self.port,
            ):
                self._plain = PlainReader(
                    self.host, self.port, self.verify, clock.real(self.http_timeout)
                )
            return self._plain

    def _sync(self, method: str, path: str, params: Mapping[str, Any]) -> Any:
        self.fence.check()
        what = f"{method} /{path}"
        args = {k: _form(v) for k, v in params.items() if v is not None}
        if method == "GET":
            # The token first, as the requests path reads it before any request: a
            # missing token file is said before a missing CA bundle.
            self._read_token()
            try:
                reader = self._reader()
            except OSError as e:  # the CA bundle cannot be read
                self._cannot_connect(what, e)
            if reader is not None:
                return self._plain_get(reader, what, path, args)
        import proxmoxer
        import requests

        api = self._connect()
        resource = api(path)
        try:
            if method == "GET":
                return self._answered(resource.get(**args))
            if method == "POST":
                return self._answered(resource.post(**args))
            if method == "PUT":
                return self._answered(resource.put(**args))
            if method == "DELETE":
                return self._answered(resource.delete(**args))
            raise ValueError(method)
        except proxmoxer.core.ResourceException as e:
            self._refused(what, e)
        except requests.exceptions.SSLError as e:
            self._untrusted(what, e)
        except requests.exceptions.ConnectionError as e:
            if not refused_connection(e):
                self._fail(what, f"{type(e).__name__}: {shortened(e)}", **_UNREACHABLE)
            self._nothing_listens(what)
        except (
            requests.exceptions.Timeout,
            requests.exceptions.ChunkedEncodingError,
        ) as e:
            self._fail(what, f"{type(e).__name__}: {shortened(e)}", **_UNREACHABLE)
        except ValueError as e:  # a reply that is not JSON
            self._unreadable(what, e)
        except OSError as e:  # requests raises a bare OSError for a missing CA bundle
            self._cannot_connect(what, e)
        return None  # unreachable: _fail raises

    def _plain_get(self, reader: PlainReader, what: str, path: str, args: Any) -> Any:
        """A GET through the standard library, its failures said as ``_sync`` says
        those of requests (the same kinds, the same words)."""
        authorization = f"PVEAPIToken={self.token.token_id}={self.token.secret}"
        try:
            return self._answered(reader.get(path, args, authorization))
        except plainget.Refused as e:
            self._refused(what, e)
        except ssl.SSLError as e:
            self._untrusted(what, e)
        except ConnectionRefusedError:
            self._nothing_listens(what)
        except (OSError, http.client.HTTPException) as e:
            self._fail(what, f"{type(e).__name__}: {shortened(e)}", **_UNREACHABLE)
        except ValueError as e:  # a reply that is not JSON, or not gzip as it says
            self._unreadable(what, e)

    def _answered(self, reply: Any) -> Any:
        self.reached = True
        return reply

    # --- requests ---------------------------------------------------------------

    def send_early(self, method: str, path: str, params: Mapping[str, Any]) -> None:
        """Send a read now, in a thread, before any event loop runs; the first
        :meth:`request` for it takes its answer as its first attempt. A plan sends its
        listing so while it reads the rest of the manifest: PVE's answer and the
        network's round trip are then waited for beside that work, not after it."""
        _check_path(self.backend, path)
        key = _key(method, path, params)
        if key not in self._early:
            self._early[key] = self._threads.submit(self._sync, method, key[1], params)

    async def request(
        self, method: str, path: str, params: Mapping[str, Any] | None = None, *, retry: bool = True
    ) -> Any:
        """One API call, retried while the failure is transient."""
        _check_path(self.backend, path)
        backoff = self.retry if retry else Backoff(attempts=1)
        sent = 0
        early = self._early.pop(_key(method, path, params or {}), None)

        async def once() -> Any:
            nonlocal sent, early
            sent += 1
            self.requests += 1
            try:
                if early is not None:
                    answer, early = asyncio.wrap_future(early), None
                    return await answer
                return await self._threads.run(self._sync, method, path.strip("/"), params or {})
            except ProxmoxError as e:
                e.attempts = sent
                raise

        try:
            return await retry_async(
                once,
                backoff=backoff,
                retryable=lambda e: isinstance(e, ProxmoxError) and e.transient,
                layer=ErrorLayer.PROXMOX,
                reason=retry_reason,
            )
        except ProxmoxError as e:
            if not (e.transient and sent > 1):
                raise
            final = ProxmoxError(
                self.backend,
                f"{e.detail} (gave up after {sent} attempts)",
                transient=True,
                status=e.status,
                kind=e.kind,
            )
            final.attempts = sent
            raise final from None

    async def get(self, path: str, **params: Any) -> Any:
        return await self.request("GET", path, params)

    async def put(self, path: str, **params: Any) -> Any:
        return await self.request("PUT", path, params)

    async def post(self, path: str, **params: Any) -> Any:
        return await self.request("POST", path, params)

    async def delete(self, path: str, **params: Any) -> Any:
        return await self.request("DELETE", path, params)

    # --- tasks ------------------------------------------------------------------

    async def task(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        what: str,
        timeout: float,
        on_upid: Callable[[str], None] | None = None,
    ) -> TaskResult:
        """Start a worker (the call answers a UPID) and wait for its end.

        ``on_upid`` hears the UPID as soon as PVE answers (the journal records it: a
        task goes on when sand is killed, and the next run waits for it)."""
        try:
            upid = await self.request(method, path, params)
        except ProxmoxError as e:
            err = ProxmoxError(
                self.backend,
                f"{what}: {e.detail}",
                transient=e.transient,
                status=e.status,
                kind=e.kind,
            )
            err.attempts = e.attempts
            raise err from None
        if not upid:  # a synchronous answer: nothing to wait for
            return TaskResult("", "OK")
        if on_upid is not None:
            on_upid(str(upid))
        return await self.wait(str(upid), what=what, timeout=timeout)

    async def wait(self, upid: str, *, what: str, timeout: float) -> TaskResult:
        """Poll a task until it stops; OK and ``WARNINGS: n`` succeed, anything else raises."""
        node = upid.split(":")[1] if upid.count(":") >= 2 else ""
        activity.step(what, limit=timeout)
        deadline = self.monotonic() + timeout
        delays = self.poll.delays()
        while True:
            status = await self.get(f"nodes/{node}/tasks/{upid}/status")
            if status.get("status") == "stopped":
                break
            delay = next(delays)
            if self.monotonic() + delay > deadline:
                raise ProxmoxError(
                    self.backend,
                    f"{what}: task {upid} still running after {timeout:.0f}s",
                    transient=True,
                    upid=upid,
                    kind=ErrorKind.TIMEOUT,
                )
            await self.sleep(delay)
        exitstatus = one_line(str(status.get("exitstatus") or "unexpected status"), 500)
        if exitstatus == "OK":
            return TaskResult(upid, exitstatus)
        lines = await self._task_log(node, upid)
        if exitstatus.startswith("WARNINGS"):
            found = [line for line in lines if "WARN" in line and not line.startswith("TASK")]
            warnings = tuple(f"{what}: {w}" for w in (found or [exitstatus]))
            self.warnings.extend(warnings)
            for w in warnings:
                get_logger("sand.proxmox").warning(
                    "proxmox.task_warning", backend=self.backend, warning=w, upid=upid
                )
            return TaskResult(upid, exitstatus, warnings)
        tail = "\n  ".join(lines[-8:]) or "(no log)"
        kind, transient = classify_task(exitstatus)
        raise ProxmoxError(
            self.backend,
            self._scrub(f"{what} failed: {exitstatus}\n  last task log lines:\n  {tail}"),
            transient=transient,
            upid=upid,
            kind=kind,
        )

    async def _task_log(self, node: str, upid: str) -> list[str]:
        try:
            rows = await self.get(f"nodes/{node}/tasks/{upid}/log", limit=1000)
        except ProxmoxError:
            return []
        # A task log repeats what the guest-facing side wrote (qemu, the agent, a
        # hook script): each line inert and on one line before it is shown or kept.
        return [one_line(str(row.get("t", "")), 500) for row in rows or [] if isinstance(row, dict)]

    async def close(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await self._threads.run(api._store["session"].close)
        plain, self._plain = self._plain, None
        if plain is not None:
            plain.close()
        self._threads.close()


def _key(method: str, path: str, params: Mapping[str, Any]) -> tuple[str, str, str]:
    return (method, path.strip("/"), repr(sorted(params.items())))


def _form(value: Any) -> Any:
    if isinstance(value, bool):
        return 1 if value else 0
    return value


_UNREACHABLE: dict[str, Any] = {"kind": ErrorKind.UNREACHABLE, "transient": True}
