"""Conditional GETs against GitHub's REST API, polite to its rate limits.

Each answer's ``etag`` is kept (in sand's state dir, per project) with its body, and
sent back as ``If-None-Match``: an unchanged listing is a ``304 Not Modified``, which
GitHub does not count against the rate limit when the request is authorised
(https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api
#use-conditional-requests-if-appropriate). A limit reached (``x-ratelimit-remaining:
0`` with ``x-ratelimit-reset``, or a ``retry-after`` on a 403 or 429: the primary and
secondary limits, https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-
the-rest-api) is a :class:`RateLimited` naming when to come back; until then no
request is sent. The token goes in the ``Authorization`` header, only over HTTPS (or
to this host's loopback, where a test's fake listens), never in a URL or a log.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sand.state.private import ensure_private_dir
from sand.state.private import write_private_file as write_private
from sand.workitems.branches import WorkItemError

HTTP_TIMEOUT = 30.0
MAX_BODY = 8 << 20
API_VERSION = "2022-11-28"  # the REST API version sand was written against


class RateLimited(WorkItemError):
    """GitHub asked to wait: nothing is sent until ``until`` (epoch seconds)."""

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message)
        self.until = until


class NotFound(WorkItemError):
    """A 404: for the permission endpoint, someone who is no collaborator."""


@dataclass
class Answer:
    status: int  # 200, or 304 when the kept body is still current
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def fresh(self) -> bool:
        return self.status != 304


class RestClient:
    """One API root, one token, one cache directory; counts what it sent."""

    def __init__(self, api: str, token: str | None, cache: Path) -> None:
        parts = urlsplit(api)
        loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
        if token is not None and parts.scheme != "https" and not loopback:
            raise WorkItemError(f"refusing to send a GitHub token to {api}: give an https:// api")
        self.api = api.rstrip("/")
        self._token = token
        self.cache = ensure_private_dir(cache)
        self.sent = 0  # requests sent this run (the bench and the tests read it)

    def __repr__(self) -> str:
        return f"RestClient({self.api!r})"  # never the token

    def get(self, path: str) -> Answer:
        """``path`` under the API root, conditional on the body kept from last time."""
        self._wait_gate()
        url = self.api + path
        kept_file = self.cache / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".json")
        kept = _read_json(kept_file)
        request = urllib.request.Request(url, headers=self._headers(kept))
        self.sent += 1
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                raw = response.read(MAX_BODY + 1)
                headers = {k.lower(): v for k, v in response.headers.items()}
                status = response.status
        except urllib.error.HTTPError as exc:
            headers = {k.lower(): v for k, v in exc.headers.items()}
            if exc.code == 304 and kept is not None:
                self._note_limits(headers)
                return Answer(304, kept["body"], headers)
            self._limited(exc.code, headers)
            if exc.code == 404:
                raise NotFound(f"GitHub answered 404 for {path}") from None
            raise WorkItemError(f"GitHub answered {exc.code} for {path}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WorkItemError(f"cannot reach {self.api}: {reason}") from None
        self._note_limits(headers)
        if len(raw) > MAX_BODY:
            raise WorkItemError(f"GitHub's answer for {path} is larger than 8 MiB")
        try:
            body = json.loads(raw)
        except ValueError:
            raise WorkItemError(f"GitHub's answer for {path} is not JSON") from None
        if headers.get("etag"):
            record = {"etag": headers["etag"], "body": body}
            write_private(kept_file, json.dumps(record).encode())
        return Answer(status, body, headers)

    def _headers(self, kept: dict[str, Any] | None) -> dict[str, str]:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "sand-generators",
        }
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        if kept is not None and isinstance(kept.get("etag"), str):
            headers["If-None-Match"] = kept["etag"]
        return headers

    # --- the rate limits ------------------------------------------------------------

    @property
    def _gate_file(self) -> Path:
        return self.cache / "rate-limit.json"

    def _wait_gate(self) -> None:
        gate = _read_json(self._gate_file)
        until = float(gate.get("until", 0)) if gate else 0.0
        if until > time.time():
            raise RateLimited(_limited_message(until), until)

    def _note_limits(self, headers: dict[str, str]) -> None:
        """Remember a limit spent, so the next poll waits without asking."""
        if headers.get("x-ratelimit-remaining") == "0":
            until = _number(headers.get("x-ratelimit-reset"))
            if until:
                write_private(self._gate_file, json.dumps({"until": until}).encode())

    def _limited(self, code: int, headers: dict[str, str]) -> None:
        if code not in (403, 429):
            return
        after = _number(headers.get("retry-after"))
        until = time.time() + after if after else 0.0
        if not until and headers.get("x-ratelimit-remaining") == "0":
            until = _number(headers.get("x-ratelimit-reset"))
        if until:
            write_private(self._gate_file, json.dumps({"until": until}).encode())
            raise RateLimited(_limited_message(until), until)


def _limited_message(until: float) -> str:
    wait = max(0, round(until - time.time()))
    at = time.strftime("%H:%M:%S", time.localtime(until))
    return f"GitHub's rate limit is reached: retry after {wait}s ({at})"


def _number(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
