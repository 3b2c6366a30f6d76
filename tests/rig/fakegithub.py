"""A fake of the few GitHub REST endpoints the GitHub generator calls, over real HTTP.

Written from GitHub's published API description (REST API version 2022-11-28):

- "List repository issues", ``GET /repos/{owner}/{repo}/issues`` with ``labels``
  (comma-separated names, all required) and ``state`` (default open); pull requests are
  listed too and carry a ``pull_request`` object
  (https://docs.github.com/en/rest/issues/issues#list-repository-issues).
- "Get repository permissions for a user", ``GET /repos/{owner}/{repo}/collaborators/
  {username}/permission``: ``{"permission": "admin"|"write"|"read"|"none",
  "role_name": ..., "user": {...}}``; maintain maps to write, triage to read
  (https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user).
- "List issue events", ``GET /repos/{owner}/{repo}/issues/{issue_number}/events``:
  ``labeled`` events carry ``label: {name, color}`` and ``actor``
  (https://docs.github.com/en/rest/issues/events#list-issue-events).
- "Get a pull request", ``GET /repos/{owner}/{repo}/pulls/{pull_number}``: ``head``
  with ``ref`` and ``repo.full_name`` (https://docs.github.com/en/rest/pulls/pulls).
- Conditional requests: every answer has an ``etag``; ``If-None-Match`` with it is a
  ``304`` with no body, which does not spend the rate limit
  (https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api).
- Rate limits: ``x-ratelimit-limit``/``-remaining``/``-reset`` on every answer; spent,
  a ``403`` with ``x-ratelimit-remaining: 0``; a secondary limit is a ``429`` (or 403)
  with ``retry-after`` seconds
  (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Request:
    path: str
    status: int
    conditional: bool
    authorization: str | None


@dataclass
class FakeGitHub:
    """One repository's issues, pull requests, collaborators and label events."""

    repo: str = "acme/app"
    token: str | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    limit: int = 5000
    remaining: int = 5000
    retry_after: int | None = None  # the next request meets a secondary limit
    log: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- the world as a test sets it ------------------------------------------------

    def open_issue(self, number: int, author: str, title: str = "", body: str = "") -> None:
        self.issues[number] = {
            "id": 1000 + number,
            "number": number,
            "title": title or f"issue {number}",
            "body": body,
            "state": "open",
            "html_url": f"https://github.com/{self.repo}/issues/{number}",
            "user": {"login": author, "id": hash(author) % 10000, "type": "User"},
            "labels": [],
            "created_at": "2026-12-01T00:00:00Z",
        }

    def open_pull(self, number: int, author: str, head: str, head_repo: str = "") -> None:
        self.open_issue(number, author, f"pull {number}")
        url = f"https://api.github.com/repos/{self.repo}/pulls/{number}"
        self.issues[number]["pull_request"] = {"url": url, "merged_at": None}
        self.pulls[number] = {
            "number": number,
            "state": "open",
            "head": {"ref": head, "sha": "0" * 40, "repo": {"full_name": head_repo or self.repo}},
            "base": {"ref": "main", "repo": {"full_name": self.repo}},
        }

    def label(self, number: int, name: str, by: str) -> None:
        self.issues[number]["labels"].append({"name": name, "color": "ededed"})
        self.events.setdefault(number, []).append(
            {
                "id": len(self.events) + 1,
                "event": "labeled",
                "actor": {"login": by},
                "label": {"name": name, "color": "ededed"},
            }
        )

    def unlabel(self, number: int, name: str, by: str) -> None:
        labels = self.issues[number]["labels"]
        self.issues[number]["labels"] = [x for x in labels if x["name"] != name]
        self.events.setdefault(number, []).append(
            {"event": "unlabeled", "actor": {"login": by}, "label": {"name": name}}
        )

    def close(self, number: int) -> None:
        self.issues[number]["state"] = "closed"

    # --- answers --------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        prefix = f"/repos/{self.repo}/"
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}
        rest = path[len(prefix) :].split("/")
        if rest == ["issues"]:
            wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
            state = query.get("state", ["open"])[0]
            found = [
                i for _, i in sorted(self.issues.items())
                if (state == "all" or i["state"] == state)
                and all(w in {x["name"] for x in i["labels"]} for w in wanted)
            ]  # fmt: skip
            return 200, found
        if len(rest) == 3 and rest[0] == "collaborators" and rest[2] == "permission":
            login = unquote(rest[1])
            if login not in self.permissions:
                return 404, {"message": f"{login} is not a user"}
            permission = self.permissions[login]
            base = {"maintain": "write", "triage": "read"}.get(permission, permission)
            return 200, {"permission": base, "role_name": permission, "user": {"login": login}}
        if len(rest) == 3 and rest[0] == "issues" and rest[2] == "events":
            return 200, self.events.get(int(rest[1]), [])
        if len(rest) == 2 and rest[0] == "pulls" and int(rest[1]) in self.pulls:
            return 200, self.pulls[int(rest[1])]
        return 404, {"message": "Not Found"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        auth = self.headers.get("Authorization")
        conditional = self.headers.get("If-None-Match")
        with fake.lock:
            status, body, headers = self._answer(fake, parts.path, parse_qs(parts.query), auth)
            if status == 200 and conditional == headers.get("etag"):
                status, body = 304, None
            elif status == 200:
                fake.remaining = max(0, fake.remaining - 1)
            headers["x-ratelimit-remaining"] = str(fake.remaining)
            fake.log.append(Request(self.path, status, conditional is not None, auth))
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(
        self, fake: FakeGitHub, path: str, query: dict[str, list[str]], auth: str | None
    ) -> tuple[int, Any, dict[str, str]]:
        reset = str(int(time.time()) + 3600)
        headers = {"x-ratelimit-limit": str(fake.limit), "x-ratelimit-reset": reset}
        if fake.token is not None and auth != f"Bearer {fake.token}":
            return 401, {"message": "Bad credentials"}, headers
        if fake.retry_after is not None:
            headers["retry-after"] = str(fake.retry_after)
            fake.retry_after = None
            return 429, {"message": "You have exceeded a secondary rate limit."}, headers
        if fake.remaining <= 0:
            return 403, {"message": "API rate limit exceeded"}, headers
        status, body = fake.answer(path, query)
        if status == 200:
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            headers["etag"] = f'W/"{digest[:40]}"'
        return status, body, headers


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGitHub) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class FakeGitHubServer:
    """``FakeGitHub`` served on 127.0.0.1 until ``stop``; ``api`` is its root."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake
        self._server = _Server(fake)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
