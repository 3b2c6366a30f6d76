"""What the broker allows of a plain HTTP request: the GitHub API, and declared hosts.

Besides git's smart HTTP, a guest may reach through the broker, at
``http://<broker>/<host>/<path>``:

- the GitHub REST API of its grants' repositories (``api.github.com``, or a GitHub
  Enterprise host's ``/api/v3``), for the operations a grant's ``api`` names: each
  request is mapped to one operation and one repository by its method and path,
  and the repository must be a declared one;
- a host a grant's ``hosts`` names, any path, with the grant's header attached.

Only the decisions are here (pure functions of the grants, the method, the path
and the body); ``server`` authenticates, records and forwards.
"""

from __future__ import annotations

import fnmatch
import json
import re

from sand.desired.brokered import BrokerGrant
from sand.manifest.broker import repo_key

GITHUB_API = "api.github.com"
ENTERPRISE_PREFIX = "api/v3/"
# Dot segments and encoded separators: a server that normalises them after the
# broker decided would answer for another path (another repository).
_SMUGGLED = re.compile(r"%2[eEfF]|%5[cC]|\\")
_REPO_PATH = re.compile(r"/repos/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)(/.*)?")
_COMMENTS = re.compile(r"/issues/[0-9]+/comments")
READ_METHODS = ("GET", "HEAD")


class Refused(Exception):
    """A request the broker will not forward: the status and what the agent is shown."""

    def __init__(self, status: int, message: str, plain: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.plain = plain  # git's text/plain; else JSON, for an API client


def path_problem(path: str) -> str | None:
    """Why the broker will not forward ``path`` (a URL path without its query)."""
    segments = path.split("/")
    if any(s in (".", "..") for s in segments) or _SMUGGLED.search(path):
        return "a path with '.' or '..' segments or an encoded separator is not forwarded"
    return None


def api_target(host: str, path: str) -> tuple[str, str] | None:
    """(the repositories' host, the API path) when ``host``/``path`` (the path
    without its leading slash) is a request to a GitHub REST API; else None."""
    if host == GITHUB_API:
        return "github.com", "/" + path
    if path.startswith(ENTERPRISE_PREFIX):
        return host, "/" + path.removeprefix(ENTERPRISE_PREFIX)
    return None


def own_links(value: str, host: str, path: str, api_path: str) -> str:
    """``value`` (a header of an answer to ``path``) with GitHub's links to the asked
    repository by its id, ``/repositories/ID/...`` (a listing's next page), written by
    its name, ``/repos/OWNER/REPO/...``: the only form the broker maps to a repository.
    The id is the asked repository's: a listing links to pages of itself."""
    found = _REPO_PATH.fullmatch(api_path.partition("?")[0])
    if found is None:
        return value
    prefix = path[: len(path.partition("?")[0]) - len(api_path.partition("?")[0]) + 1]
    by_id = re.compile(rf"https://{re.escape(host)}{re.escape(prefix)}repositories/[0-9]+/")
    return by_id.sub(f"https://{host}{prefix}repos/{found[1]}/{found[2]}/", value)


def api_operation(method: str, api_path: str) -> tuple[str, str, str] | None:
    """(operation, owner, repository) a GitHub API request is, or None when it is
    none the broker knows (refused)."""
    found = _REPO_PATH.fullmatch(api_path)
    if found is None:
        return None
    owner, repo, rest = found[1], found[2], found[3] or ""
    if method in READ_METHODS:
        return "read", owner, repo
    if method != "POST":
        return None
    if rest == "/issues":
        return "issue", owner, repo
    if _COMMENTS.fullmatch(rest):
        return "comment", owner, repo
    if rest == "/pulls":
        return "pull-request", owner, repo
    return None


def pull_request_problem(body: bytes, owner: str, push: tuple[str, ...]) -> str | None:
    """Why a new pull request's ``head`` is not a branch of this repository that the
    grant's push patterns allow."""
    try:
        data = json.loads(body)
        head = data["head"] if isinstance(data, dict) else None
    except (ValueError, KeyError):
        head = None
    if not isinstance(head, str) or not head:
        return "a pull request's body is JSON with its 'head' branch"
    if "head_repo" in data:
        return "a pull request from another repository is not opened through the broker"
    head_owner, colon, branch = head.rpartition(":")
    if colon and head_owner != owner:
        return f"a pull request's head is a branch of {owner}'s repository, not {head_owner}'s"
    if not any(fnmatch.fnmatchcase(branch, p) for p in push):
        return f"{branch} is not among the branches the grant may push ({', '.join(push)})"
    return None


def api_request(method: str, target: tuple[str, str]) -> dict[str, str]:
    """What a GitHub API request (``target`` from ``api_target``) is, as the
    operations log says it: its repository and operation; ``Refused`` when it is
    none the broker forwards."""
    repo_host, api_path = target
    found = api_operation(method, api_path)
    if found is None:
        raise Refused(
            403,
            f"{method} {api_path} is not an API operation the broker forwards "
            "(read, issue, comment, pull-request on /repos/OWNER/REPO)",
        )
    operation, owner, repo = found
    return {"repository": f"{repo_host}/{owner}/{repo}", "service": "api", "operation": operation}


def api_grant(vm: str, grants: tuple[BrokerGrant, ...], said: dict[str, str]) -> BrokerGrant:
    """The grant allowing the API request ``said`` (from ``api_request``); ``Refused``
    when none does."""
    repository, operation = said["repository"], said["operation"]
    key = repo_key(f"https://{repository}")
    granting = [g for g in grants if key in {repo_key(r) for r in g.repositories}]
    if not granting:
        raise Refused(403, f"{vm} may not reach {repository}: no brokered secret of its allows it")
    for grant in granting:
        if operation in grant.api:
            return grant
    allowed = ", ".join(sorted({o for g in granting for o in g.api})) or "nothing"
    name = repository.split("/", 1)[1]
    raise Refused(403, f"{vm} may not {operation} on {name} through the API (allowed: {allowed})")


def host_grant(vm: str, grants: tuple[BrokerGrant, ...], host: str) -> BrokerGrant:
    """The grant naming ``host`` (``host[:port]``, lower-case) in its hosts."""
    for grant in grants:
        if host in grant.https_hosts:
            return grant
    raise Refused(
        403,
        f"{vm} may not reach {host} through the broker: no brokered secret of its names it "
        "(git's smart HTTP, the GitHub API of its repositories, and declared hosts only)",
    )


def credential_header(grant: BrokerGrant, token: str, github: bool) -> dict[str, str]:
    """The header carrying the real token upstream: GitHub's ``Bearer``, or the
    grant's declared header for its hosts."""
    if github:
        return {"Authorization": f"Bearer {token}"}
    name, _, template = grant.header.partition(":")
    return {name.strip(): template.strip().replace("{token}", token)}
