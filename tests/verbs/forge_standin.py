"""A local stand-in for drupal.org: the issue page and the GitLab v4 calls publish makes.

It serves on 127.0.0.1, keeps one canonical project and its issue fork, makes
a commit for every ``POST .../repository/commits`` (so compare and branch
reads see what was published) and records every request it received --
method, path, query, headers and JSON body -- for tests to assert on.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Request:
    method: str
    path: str  # percent-decoded
    raw_path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any


@dataclass
class ForgeState:
    project: str = "widget"
    nid: int = 123
    title: str = "Fix the widget &amp; its gears"
    target: str = "1.0.x"
    target_tip: str = ""
    canonical_id: int = 11
    fork_id: int = 22
    fork_exists: bool = True
    # branch -> list of published commits (dicts like GitLab's), oldest first
    fork_branches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # branch -> tip for branches made outside sand (no commits of their own)
    fork_tips: dict[str, str] = field(default_factory=dict)
    merge_requests: list[dict[str, Any]] = field(default_factory=list)
    redirect_issue_page: bool = False
    edge_blocks_commits: bool = False


class ForgeStandin:
    def __init__(self, state: ForgeState | None = None) -> None:
        self.state = state or ForgeState()
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                standin._handle(self, "GET")

            def do_POST(self) -> None:
                standin._handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def api(self) -> str:
        return self.url + "/api/v4"

    def issue_url(self) -> str:
        return f"{self.url}/project/{self.state.project}/issues/{self.state.nid}"

    def start(self) -> ForgeStandin:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, method: str, contains: str = "") -> list[Request]:
        return [r for r in self.requests if r.method == method and contains in r.path]

    # -- request handling ----------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        req = Request(
            method,
            unquote(parts.path),
            parts.path,
            parse_qs(parts.query),
            {k.lower(): v for k, v in h.headers.items()},
            body,
        )
        with self._lock:
            self.requests.append(req)
            status, ctype, payload, extra = self._route(req)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _route(self, r: Request) -> tuple[int, str, Any, dict[str, str]]:
        s = self.state
        j = "application/json"
        if r.path == f"/project/{s.project}/issues/{s.nid}":
            if s.redirect_issue_page:
                return 302, "text/html", b"", {"Location": self.url + "/elsewhere"}
            page = (
                f"<html><head><title>{s.title} [#{s.nid}] | Drupal.org</title></head>"
                f"<body><h1>not this</h1></body></html>"
            )
            return 200, "text/html", page.encode(), {}
        api = "/api/v4"
        if not r.path.startswith(api):
            return 404, "text/html", b"<html>not found</html>", {}
        p = r.path[len(api) :]
        canonical = {
            "id": s.canonical_id, "path_with_namespace": f"project/{s.project}",
            "default_branch": s.target, "web_url": f"{self.url}/project/{s.project}",
        }  # fmt: skip
        fork = {
            "id": s.fork_id, "path_with_namespace": f"issue/{s.project}-{s.nid}",
            "default_branch": s.target, "forked_from_project": {"id": s.canonical_id},
            "web_url": f"{self.url}/issue/{s.project}-{s.nid}",
        }  # fmt: skip
        if r.method == "GET":
            if p == f"/projects/project/{s.project}":
                return 200, j, canonical, {}
            if p == f"/projects/issue/{s.project}-{s.nid}":
                return (200, j, fork, {}) if s.fork_exists else (404, j, {"message": "404"}, {})
            if p == f"/projects/{s.canonical_id}/repository/branches/{s.target}":
                return 200, j, {"name": s.target, "commit": {"id": s.target_tip}}, {}
            prefix = f"/projects/{s.fork_id}/repository/branches/"
            if p.startswith(prefix):
                tip = self._fork_tip(p[len(prefix) :])
                return (200, j, {"commit": {"id": tip}}, {}) if tip else (404, j, {}, {})
            if p == f"/projects/{s.fork_id}/repository/compare":
                branch = r.query["to"][0]
                assert r.query["from"] == [s.target_tip]
                assert r.query["from_project_id"] == [str(s.canonical_id)]
                return 200, j, {"commits": s.fork_branches.get(branch, [])}, {}
            if p == f"/projects/{s.fork_id}/merge_requests":
                src = r.query["source_branch"][0]
                return 200, j, [m for m in s.merge_requests if m["source_branch"] == src], {}
        if r.method == "POST":
            if s.edge_blocks_commits:
                return 404, "text/html", b"<html>blocked</html>", {}
            if p == f"/projects/{s.fork_id}/repository/commits":
                return self._commit(r.body)
            if p == f"/projects/{s.fork_id}/merge_requests":
                mr = {**r.body, "iid": len(s.merge_requests) + 1}
                mr["web_url"] = f"{self.url}/issue/{s.project}-{s.nid}/-/merge_requests/{mr['iid']}"
                s.merge_requests.append(mr)
                return 201, j, mr, {}
        return 404, j, {"message": "404 Not Found"}, {}

    def _fork_tip(self, branch: str) -> str | None:
        commits = self.state.fork_branches.get(branch)
        if commits:
            return str(commits[-1]["id"])
        return self.state.fork_tips.get(branch)

    def _commit(self, body: dict[str, Any]) -> tuple[int, str, Any, dict[str, str]]:
        s = self.state
        branch = body["branch"]
        if self._fork_tip(branch) is None and "start_sha" not in body:
            return 400, "application/json", {"message": "branch does not exist"}, {}
        commits = s.fork_branches.setdefault(branch, [])
        sha = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        commit = {
            "id": sha,
            "message": body["commit_message"],
            "author_name": body["author_name"],
            "author_email": body["author_email"],
        }
        commits.append(commit)
        return 201, "application/json", commit, {}
