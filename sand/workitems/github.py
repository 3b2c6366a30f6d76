"""The GitHub generator's work items: open issues or pull requests carrying a label,
from people who may write to the repository.

The few REST endpoints it calls (API version 2022-11-28; the fields it reads are
``FIELDS_READ``, which the contract test holds the fake to):

- ``GET /repos/{owner}/{repo}/issues?labels=L&state=open`` — "List repository issues"
  (https://docs.github.com/en/rest/issues/issues#list-repository-issues): issues and
  pull requests both; a pull request carries a ``pull_request`` key.
- ``GET /repos/{owner}/{repo}/collaborators/{username}/permission`` — "Get repository
  permissions for a user" (https://docs.github.com/en/rest/collaborators/collaborators
  #get-repository-permissions-for-a-user): ``permission`` is admin, write, read or none
  (maintain reads as write, triage as read).
- ``GET /repos/{owner}/{repo}/issues/{number}/events`` — "List issue events"
  (https://docs.github.com/en/rest/issues/events#list-issue-events): who added the label
  (``event: labeled``, ``label.name``, ``actor.login``).
- ``GET /repos/{owner}/{repo}/pulls/{number}`` — "Get a pull request"
  (https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request): its head branch.

Anyone can open an issue, and on many repositories anyone can label one through a
bot, so an item makes a VM only when its author, or the person who labelled it, has
write access: 0 VMs from anyone else. Everything read is data: the title and body
are kept as text the plan filters, the number is an int, the branch is checked with
git's rules before any use (``sand.desired.generated``).

A poll where nothing changed is one conditional request answered ``304``: what was
decided from the listing last time (who may write, the head branches) is kept beside
its ``etag`` and used again, unasked.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sand.desired.generated import WorkItem
from sand.manifest.generators import GitHubSource
from sand.state.private import write_private_file
from sand.workitems.branches import WorkItemError
from sand.workitems.rest import NotFound, RateLimited, RestClient

# Every field of every answer sand reads, by endpoint (the contract test's list).
FIELDS_READ: dict[str, tuple[str, ...]] = {
    "issues": ("number", "title", "body", "html_url", "user.login", "pull_request"),
    "permission": ("permission",),
    "events": ("event", "label.name", "actor.login"),
    "pull": ("head.ref", "head.repo.full_name"),
}
WRITERS = ("admin", "write")
MAX_PAGES = 3  # 300 items: past any generator's max (200)
MAX_TEXT = 65536  # an item's body kept for the plan and the guest, at most


def github_items(
    source: GitHubSource, client: RestClient, *, generator: str
) -> tuple[list[WorkItem], list[str]]:
    """The items of ``source`` that may make a VM, and what the plan should say
    (a limit reached: the last poll's items stand)."""
    which = hashlib.sha256(f"{source.github}\0{source.label}\0{source.kind}".encode())
    decided = client.cache / f"decided-{generator}-{which.hexdigest()[:12]}.json"
    try:
        pages, fresh = _listing(source, client)
        kept = None if fresh else _read_decided(decided)
        items = kept if kept is not None else _decide(source, client, _flat(pages))
    except RateLimited as exc:
        kept = _read_decided(decided)
        if kept is None:
            raise WorkItemError(f"generator {generator}: {exc}") from None
        return kept, [f"generator {generator}: {exc}; the last poll's items stand"]
    except WorkItemError as exc:
        raise WorkItemError(f"generator {generator}: {exc}") from None
    if kept is None:
        write_private_file(decided, json.dumps([asdict(i) for i in items]).encode())
    return items, []


def _flat(pages: list[list[Any]]) -> list[Any]:
    return [raw for page in pages for raw in page]


def _listing(source: GitHubSource, client: RestClient) -> tuple[list[list[Any]], bool]:
    """The open items carrying the label, page by page; whether any page changed."""
    path = (
        f"/repos/{source.github}/issues?labels={quote(source.label, safe='')}"
        "&state=open&per_page=100&sort=created&direction=asc"
    )
    pages: list[list[Any]] = []
    fresh = False
    for _ in range(MAX_PAGES):
        answer = client.get(path)
        if not isinstance(answer.body, list):
            raise WorkItemError(f"GitHub's listing of {source.github} is not a list")
        pages.append(answer.body)
        fresh = fresh or answer.fresh
        following = _next_page(answer.headers.get("link", ""), client.api)
        if following is None:
            break
        path = following
    return pages, fresh


def _next_page(link: str, api: str) -> str | None:
    """The path of the ``rel="next"`` page, only under the same API root (a link
    elsewhere would carry the token there)."""
    for part in link.split(","):
        target, _, rel = part.partition(";")
        url = target.strip().strip("<>")
        if 'rel="next"' in rel and url.startswith(api + "/"):
            return url[len(api) :]
    return None


def _decide(source: GitHubSource, client: RestClient, listing: list[Any]) -> list[WorkItem]:
    may_write: dict[str, bool] = {}

    def writer(login: str) -> bool:
        if login not in may_write:
            path = f"/repos/{source.github}/collaborators/{quote(login, safe='')}/permission"
            try:
                answer = client.get(path).body
            except NotFound:
                answer = {}  # not a collaborator at all
            may_write[login] = _dig(answer, "permission") in WRITERS
        return may_write[login]

    items: list[WorkItem] = []
    for raw in listing:
        number, author = _dig(raw, "number"), _dig(raw, "user.login")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            continue
        is_pull = isinstance(_dig(raw, "pull_request"), dict)
        if is_pull != (source.kind == "pulls"):
            continue
        allowed = isinstance(author, str) and writer(author)
        if not allowed:
            labeller = _labeller(source, client, number)
            allowed = labeller is not None and writer(labeller)
        if not allowed:
            continue
        items.append(
            WorkItem(
                key=f"{source.github}#{number}",
                number=number,
                branch=_head_branch(source, client, number) if is_pull else None,
                title=_text(_dig(raw, "title"))[:1000],
                body=_text(_dig(raw, "body"))[:MAX_TEXT],
                url=_text(_dig(raw, "html_url"))[:1000],
            )
        )
    return items


def _labeller(source: GitHubSource, client: RestClient, number: int) -> str | None:
    """Who last added the generator's label to item ``number``."""
    events = client.get(f"/repos/{source.github}/issues/{number}/events?per_page=100").body
    who = None
    for event in events if isinstance(events, list) else []:
        if _dig(event, "event") == "labeled" and _dig(event, "label.name") == source.label:
            actor = _dig(event, "actor.login")
            who = actor if isinstance(actor, str) else None
    return who


def _head_branch(source: GitHubSource, client: RestClient, number: int) -> str | None:
    """A pull request's head branch, when it is a branch of this repository (a fork's
    is not there to check out: its VM takes the repository's own branch)."""
    pull = client.get(f"/repos/{source.github}/pulls/{number}").body
    ref, home = _dig(pull, "head.ref"), _dig(pull, "head.repo.full_name")
    if isinstance(ref, str) and isinstance(home, str) and home.lower() == source.github.lower():
        return ref
    return None


def _dig(data: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _read_decided(path: Path) -> list[WorkItem] | None:
    try:
        rows = json.loads(path.read_bytes())
        return [WorkItem(**row) for row in rows]
    except (OSError, ValueError, TypeError):
        return None
