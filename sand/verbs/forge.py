"""A small GitLab v4 client for drupal.org's forge (git.drupalcode.org).

Reads are anonymous; the token is given only to the client that writes, and
goes only into the ``PRIVATE-TOKEN`` header -- never a URL, a log line or an
error message (and it is registered for redaction besides). Redirects are
refused outright: a 3xx could carry that header to another host, and from
drupal.org's edge it means the request did not reach the API it was meant for.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import IO, Any
from urllib.parse import quote, urlencode, urlsplit

from sand.errors import ErrorLayer, SandError
from sand.terminal import one_line

MAX_RESPONSE = 8 << 20
USER_AGENT = "sand-publish/1"


class ForgeError(SandError):
    layer = ErrorLayer.FORGE


class DrupalOrgRefused(ForgeError):
    """drupal.org's edge answered instead of GitLab (an HTML 404): the call is blocked there."""


@dataclass(frozen=True)
class ForgeProject:
    id: int
    path: str  # path_with_namespace
    default_branch: str
    forked_from: int | None
    web_url: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        raise ForgeError(
            f"{req.get_method()} {urlsplit(req.full_url).path}: the server redirected "
            f"(HTTP {code}); sand refuses redirects from the forge"
        )


def http_open(req: urllib.request.Request, timeout: float = 60.0) -> tuple[int, str, bytes]:
    """(status, content type, body) of one request, redirects refused, body bounded."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get_content_type(), _read(resp)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers.get_content_type(), _read(err)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        where = urlsplit(req.full_url)
        raise ForgeError(f"{req.get_method()} {where.netloc}{where.path}: {reason}") from None


def _read(resp: IO[bytes]) -> bytes:
    body = resp.read(MAX_RESPONSE + 1)
    if len(body) > MAX_RESPONSE:
        raise ForgeError("the forge answered with more than 8 MiB; refusing it")
    return body


class GitLab:
    def __init__(self, api: str, token: str | None = None, timeout: float = 60.0) -> None:
        self.api = api.rstrip("/")
        self._token = token
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"GitLab({self.api!r}, token={'***' if self._token else None})"

    def request(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        url = self.api + path + (("?" + urlencode(params)) if params else "")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if method != "GET":
            if not self._token:
                raise ForgeError(f"{method} {path}: this client has no token to write with")
            headers["PRIVATE-TOKEN"] = self._token
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        status, ctype, raw = http_open(req, self.timeout)
        if status == 404 and ctype == "text/html":
            raise DrupalOrgRefused(
                f"{method} {path}: drupal.org's edge refused the call (an HTML 404, not GitLab's)"
            )
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            raise ForgeError(
                f"{method} {path}: HTTP {status} with a body that is not JSON"
            ) from None
        if status >= 400 and status != 404:
            detail = payload.get("message", payload) if isinstance(payload, dict) else payload
            raise ForgeError(f"{method} {path}: HTTP {status}: {one_line(str(detail), 300)}")
        return status, payload

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON at ``path``, or None when it does not exist."""
        status, payload = self.request("GET", path, params=params)
        return None if status == 404 else payload

    def post(self, path: str, body: dict[str, Any]) -> Any:
        status, payload = self.request("POST", path, body=body)
        if status == 404:
            raise ForgeError(f"POST {path}: HTTP 404 (no such project, or no access)")
        if status == 409:
            raise ForgeError(f"POST {path}: HTTP 409: {one_line(str(payload), 300)}")
        return payload

    # -- the calls publish makes ---------------------------------------------

    def project(self, path: str) -> ForgeProject | None:
        data = self.get(f"/projects/{quote(path, safe='')}")
        if data is None:
            return None
        try:
            forked = data.get("forked_from_project")
            return ForgeProject(
                id=int(data["id"]),
                path=str(data["path_with_namespace"]),
                default_branch=str(data.get("default_branch") or ""),
                forked_from=int(forked["id"]) if isinstance(forked, dict) else None,
                web_url=str(data.get("web_url") or ""),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ForgeError(f"the forge's answer for project {path} is not a project") from None

    def branch_tip(self, project: int, branch: str) -> str | None:
        data = self.get(f"/projects/{project}/repository/branches/{quote(branch, safe='')}")
        if data is None:
            return None
        try:
            return str(data["commit"]["id"])
        except (KeyError, TypeError):
            raise ForgeError(f"the forge's answer for branch {branch} has no commit") from None

    def commits_between(self, project: int, base: str, branch: str, base_project: int) -> list[Any]:
        """Commits on ``branch`` of ``project`` that ``base`` (in ``base_project``) lacks,
        oldest first."""
        data = self.get(
            f"/projects/{project}/repository/compare",
            {"from": base, "to": branch, "from_project_id": str(base_project), "straight": "false"},
        )
        commits = data.get("commits") if isinstance(data, dict) else None
        if not isinstance(commits, list):
            raise ForgeError(f"the forge could not compare {branch} with {base[:12]}")
        return commits

    def open_merge_requests(self, project: int, source_branch: str) -> list[Any]:
        data = self.get(
            f"/projects/{project}/merge_requests",
            {"source_branch": source_branch, "state": "opened"},
        )
        return data if isinstance(data, list) else []

    def create_commit(self, project: int, body: dict[str, Any]) -> str:
        data = self.post(f"/projects/{project}/repository/commits", body)
        sha = data.get("id") if isinstance(data, dict) else None
        if not isinstance(sha, str):
            raise ForgeError("the forge accepted a commit but did not say its id")
        return sha

    def create_merge_request(self, project: int, body: dict[str, Any]) -> str:
        data = self.post(f"/projects/{project}/merge_requests", body)
        url = data.get("web_url") if isinstance(data, dict) else None
        if not isinstance(url, str):
            raise ForgeError("the forge opened a merge request but did not say where")
        return url
