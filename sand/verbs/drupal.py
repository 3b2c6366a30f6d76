"""The host's side of publishing: where changes go, read from a drupal.org issue.

A person names an issue by its URL; from it alone the host derives the
canonical project (``project/<name>``), the issue fork (``issue/<name>-<nid>``,
so the ``issue/`` namespace guard is structural) and, from the issue's own
page, the merge request's title. The token is read from a host file by
convention (never a config value, never the guest) and refused when group or
others could read it.
"""

from __future__ import annotations

import os
import re
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from sand.errors import ErrorLayer, SandError
from sand.redaction import register_secret
from sand.state.private import private_file_problem
from sand.terminal import one_line
from sand.verbs.forge import USER_AGENT, ForgeError, http_open

TOKEN_FILE = "drupalorg.token"
_PROJECT = re.compile(r"^[a-z][a-z0-9_]{0,127}$")
_NID = re.compile(r"^[1-9][0-9]{0,9}$")
_ISSUE_PATH = re.compile(r"^/project/([^/]+)/issues/([^/]+)/?$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.\-]{16,255}$")


class PublishRefused(SandError):
    layer = ErrorLayer.PUBLISH


@dataclass(frozen=True)
class DrupalSites:
    """Where drupal.org lives; tests point both at a local stand-in."""

    site: str = "https://www.drupal.org"
    api: str = "https://git.drupalcode.org/api/v4"


@dataclass(frozen=True)
class Issue:
    project: str  # the project's machine name
    nid: int
    url: str  # canonical issue page URL on ``sites.site``

    @property
    def canonical_path(self) -> str:
        return f"project/{self.project}"

    @property
    def fork_path(self) -> str:
        return f"issue/{self.project}-{self.nid}"


def parse_issue_url(url: str, sites: DrupalSites) -> Issue:
    """``https://www.drupal.org/project/<name>/issues/<nid>`` and nothing looser."""
    parts = urlsplit(url.strip())
    site = urlsplit(sites.site)
    hosts = {site.netloc.lower()}
    if site.netloc.lower() == "www.drupal.org":
        hosts.add("drupal.org")
    m = _ISSUE_PATH.match(parts.path)
    if (
        parts.scheme != site.scheme
        or parts.netloc.lower() not in hosts
        or parts.query
        or m is None
        or not _PROJECT.match(m[1])
        or not _NID.match(m[2])
    ):
        raise PublishRefused(
            f"{one_line(url)!r} is not a drupal.org issue URL "
            f"(expected {sites.site}/project/<name>/issues/<number>)"
        )
    project, nid = m[1], int(m[2])
    return Issue(project, nid, f"{sites.site.rstrip('/')}/project/{project}/issues/{nid}")


class _TitleParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.in_title = False
        self.done = False
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.done:
            self.in_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.in_title:
            self.in_title, self.done = False, True

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.parts.append(data)


def title_from_page(html: str, nid: int) -> str:
    """The issue's title from its page's ``<title>``: "Title [#nid] | Drupal.org"."""
    parser = _TitleParser()
    parser.feed(html)
    title = " ".join("".join(parser.parts).split())
    title = re.sub(r"\s*\|\s*Drupal\.org$", "", title)
    title = re.sub(rf"\s*\[#{nid}\]$", "", title)
    title = one_line(title, 200)
    if not title:
        raise PublishRefused(f"the issue page for #{nid} has no title")
    return title


def fetch_issue_title(issue: Issue, timeout: float = 60.0) -> str:
    req = urllib.request.Request(issue.url, headers={"User-Agent": USER_AGENT})
    status, _ctype, body = http_open(req, timeout)
    if status != 200:
        raise ForgeError(f"GET {issue.url}: HTTP {status}")
    return title_from_page(body.decode("utf-8", "replace"), issue.nid)


def token_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "sand" / TOKEN_FILE


def read_token(path: Path) -> str:
    """The drupal.org token; refused unless it is a private regular file of this user."""
    if not path.exists():
        raise PublishRefused(
            f"no drupal.org token at {path}: create a GitLab personal access token on "
            f"git.drupalcode.org (scope api) and save it there with mode 0600"
        )
    problem = private_file_problem(path)
    if problem:
        raise PublishRefused(f"the drupal.org token {path} {problem}")
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise PublishRefused(f"the drupal.org token {path} cannot be read") from None
    if not _TOKEN.match(token):
        raise PublishRefused(f"the drupal.org token {path} does not hold a token")

    register_secret(token)
    return token


def branch_slug(nid: int, title: str) -> str:
    """drupal.org's naming for an issue fork branch: ``<nid>-<title-words>``."""
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return f"{nid}-{words[:40].rstrip('-')}" if words else f"{nid}-sand"
