"""Brokered secrets: a token the guest never holds, and the operations it may do.

A secret declared ``deliver: broker`` stays on the host: a broker process there
attaches it to the guest's git requests, and only to those its ``broker:`` rules
allow (the repositories it may fetch from, the branch patterns it may push to).
The guest holds a credential of its own that only the broker accepts. This module
holds the rules' shape, the one way a repository URL is compared (``repo_key``),
and the checks that need the whole manifest (a repo cloned with a brokered secret must
be one its rules list; a VM's ``secrets:`` use of one sets the broker's variables in
place of the value, which no other secret at that scope may set).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from sand.manifest import values as v
from sand.manifest.fields import Strict, empty_list, rule
from sand.manifest.rawdata import Finding
from sand.manifest.rawdata import as_dict as _dict
from sand.manifest.rawdata import as_list as _list
from sand.manifest.rawdata import as_str as _str
from sand.refname import branch_problem

Delivery = Literal["tmpfs", "broker"]
# What a brokered GitHub token may ask of its repositories' REST API: a closed list, so
# a grant reads as what it allows (docs/credentials.md#the-github-api-through-the-broker).
ApiOperation = Literal["read", "issue", "comment", "pull-request"]
DEFAULT_HEADER = "Authorization: Bearer {token}"


def broker_url_problem(url: str) -> str | None:
    """Why the broker cannot stand for ``url``: it speaks git's smart HTTP over HTTPS."""
    problem = v.repo_url_problem(url)
    if problem:
        return problem
    if urlsplit(url).scheme.lower() != "https":
        return "a brokered repository is an https:// URL (the broker speaks git's smart HTTP)"
    return None


def push_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a branch pattern: a branch name, '*' standing for any text."""
    if pattern.startswith("refs/"):
        return "write a branch name or pattern without refs/heads/ (e.g. 'agent/*')"
    return branch_problem(pattern.replace("*", "x"))


def header_problem(header: str) -> str | None:
    """Why ``header`` is not 'Name: value' with the token's place, '{token}', in the value."""
    name, colon, value = header.partition(":")
    if not colon or not re.fullmatch(r"[A-Za-z0-9-]+", name.strip()):
        return "write the header as 'Name: value', e.g. 'Authorization: Bearer {token}'"
    if value.count("{token}") != 1:
        return "the header's value holds the token's place once: '{token}'"
    return v.control_problem(header)


def https_host_problem(host: str) -> str | None:
    """Why ``host`` is not a ``host[:port]`` the broker may reach over HTTPS."""
    if any(c in host for c in "/@?#"):
        return v.hostname_problem(host)  # a URL, or credentials: said as for any host
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    if port and not port.isdigit():
        return "write the host as 'name' or 'name:port'"
    return v.hostname_problem(name)


BrokerRepo = Annotated[str, rule(broker_url_problem)]
HttpsHost = Annotated[str, rule(https_host_problem)]
Header = Annotated[str, rule(header_problem)]
PushPattern = Annotated[str, rule(push_pattern_problem)]


class BrokerRules(Strict):
    """What the broker lets a guest do with a brokered secret; everything else is refused."""

    repositories: list[BrokerRepo] = Field(
        default_factory=empty_list,
        description="The repositories (https:// clone URLs) the guest may fetch from and "
        "push to, and ask the GitHub API about ('api'); any other is refused.",
        examples=[["https://github.com/acme/webapp.git"]],
    )
    push: list[PushPattern] = Field(
        default_factory=empty_list,
        description="Branch patterns the guest may push to ('*' stands for any text, "
        "slashes included); none: fetch only. A repository's default branch is refused "
        "unless named here exactly, never by a pattern.",
        examples=[["agent/*"]],
    )
    api: list[ApiOperation] = Field(
        default_factory=empty_list,
        description="What the GitHub REST API may be asked of the repositories, through the "
        "broker: 'read' (GET under /repos/OWNER/REPO), 'issue' (open an issue), 'comment' "
        "(on an issue or pull request), 'pull-request' (open one whose head is a branch "
        "the 'push' patterns allow). None (the default): the API is refused.",
        examples=[["read", "pull-request"]],
    )
    hosts: list[HttpsHost] = Field(
        default_factory=empty_list,
        description="Hosts (name or name:port) any HTTP client in the guest may reach "
        "through the broker (http://BROKER/HOST/PATH), forwarded over HTTPS with the "
        "secret in 'header'; any other host is refused.",
        examples=[["api.example.com"]],
    )
    header: Header = Field(
        default=DEFAULT_HEADER,
        description="The header the broker adds to requests to 'hosts', '{token}' standing "
        "for the secret's value.",
        examples=["X-Api-Key: {token}"],
    )

    @model_validator(mode="after")
    def _grants_something(self) -> BrokerRules:
        if not self.repositories and not self.hosts:
            raise ValueError("a brokered secret allows 'repositories', 'hosts' or both")
        if "pull-request" in self.api and not self.push:
            raise ValueError("'pull-request' opens one from a pushed branch: add 'push' patterns")
        return self


def repo_key(url: str) -> str:
    """``host[:port]/path`` of an http(s) URL, the host lower-case and '.git' dropped:
    the one form two spellings of a repository are compared in."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    path = parts.path.strip("/")
    path = path.removesuffix(".git")
    return f"{host}/{path}"


def push_allowed(rules: BrokerRules, branch: str, default_branch: str | None) -> bool:
    """Whether ``branch`` may be pushed: it matches a pattern, and the default branch
    only when a pattern names it exactly (a broad '*' never reaches it)."""
    if branch == default_branch:
        return branch in rules.push
    return any(fnmatch.fnmatchcase(branch, p) for p in rules.push)


def check_brokered(data: Any) -> Iterator[Finding]:
    """A brokered secret's rules and its uses, each problem at its place."""
    data = _dict(data)
    secrets = _dict(data.get("secrets"))
    brokered: dict[str, set[str]] = {}
    for name, secret in secrets.items():
        secret = _dict(secret)
        deliver = secret.get("deliver")
        if deliver == "broker" and "broker" not in secret:
            yield (
                ("secrets", name, "deliver"),
                f"secret {name!r} is brokered: say what the broker allows in its 'broker' "
                "(repositories, push)",
            )
        if "broker" in secret and deliver != "broker":
            yield (
                ("secrets", name, "broker"),
                f"secret {name!r} has broker rules but is not brokered: add 'deliver: broker'",
            )
        if deliver == "broker":
            repos = _list(_dict(secret.get("broker")).get("repositories"))
            brokered[name] = {repo_key(r) for r in repos if isinstance(r, str)}
    for name, repo in _dict(data.get("repos")).items():
        repo = _dict(repo)
        token, url = _str(repo.get("token")), _str(repo.get("url"))
        if token in brokered and url is not None and repo_key(url) not in brokered[token]:
            yield (
                ("repos", name, "url"),
                f"repo {name!r} is not among the repositories the broker of secret {token!r} "
                "allows; add its URL to secrets."
                f"{token}.broker.repositories",
            )
    for i, vm in enumerate(_list(data.get("vms"))):
        yield from _broker_variables_clash(i, _list(_dict(vm).get("secrets")), set(brokered))


def broker_variables(env: str) -> tuple[str, str]:
    """The variables a VM's ``secrets:`` use of a brokered secret sets at its scope, in
    place of the value: the broker's URL, and the file holding the VM's broker credential
    (a file, not the credential: a new one is drawn at each delivery)."""
    return f"{env}_BROKER_URL", f"{env}_BROKER_CREDENTIAL_FILE"


def _broker_variables_clash(vm: int, uses: list[Any], brokered: set[str]) -> Iterator[Finding]:
    """A brokered use whose variables another secret at its scope already sets."""
    taken: dict[tuple[str, str], str] = {}
    for use in uses:
        use = _dict(use)
        name, env = _str(use.get("name")), _str(use.get("env")) or _str(use.get("name"))
        if name is not None and env is not None and name not in brokered:
            taken[(_scope_key(use.get("scope")), env)] = name
    for j, use in enumerate(uses):
        use = _dict(use)
        name, env = _str(use.get("name")), _str(use.get("env")) or _str(use.get("name"))
        if name is None or env is None or name not in brokered:
            continue
        for variable in broker_variables(env):
            other = taken.setdefault((_scope_key(use.get("scope")), variable), name)
            if other != name:
                yield (
                    ("vms", vm, "secrets", j, "name"),
                    f"secret {name!r} is brokered: it sets {variable} at its scope, which "
                    f"secret {other!r} sets too; give one of them another 'env'",
                )


def _scope_key(scope: Any) -> str:
    return (_str(scope) or "").rstrip("/") or "/"


def brokered_names(secrets: Mapping[str, Any]) -> set[str]:
    """The names of the manifest's brokered secrets (``deliver: broker``)."""
    return {name for name, s in secrets.items() if getattr(s, "deliver", None) == "broker"}
