"""``sand publish``: replay a guest checkout's commits onto a drupal.org issue fork.

The guest decides what (:class:`~sand.verbs.changeset.ChangeSet`); the host
decides where (:class:`Destination`, from the issue URL, the forge's public
API and the issue page). Then a person reads everything that would be
published and says yes; only then does the host write, with its own token:
one ``POST /projects/:fork/repository/commits`` per guest commit, then one
merge request. Commits already on the fork branch (a retry, or a second
publish after more work) are recognised by message and author, in order, and
skipped; a fork branch that went another way is refused, never overwritten.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from sand.audit.trail import record
from sand.guest.runner import GuestRunner
from sand.refname import branch_problem
from sand.terminal import one_line, visible
from sand.verbs.changeset import WARN_BYTES, ChangeSet, Commit, FileAction, MissingBase, collect
from sand.verbs.drupal import Issue, PublishRefused, branch_slug, fetch_issue_title
from sand.verbs.forge import ForgeError, ForgeProject, GitLab

Confirm = Callable[[str], bool]


class ForkMoved(ForgeError):
    """The fork branch changed between reading it and writing to it."""


@dataclass(frozen=True)
class Destination:
    """Where the commits go; every field is the host's own decision or reading."""

    issue: Issue
    issue_title: str
    canonical: ForgeProject
    fork: ForgeProject
    target_branch: str
    target_tip: str
    branch: str
    branch_tip: str | None  # None: the branch is made by the first commit

    @property
    def mr_title(self) -> str:
        return one_line(f"Issue #{self.issue.nid}: {self.issue_title}", 255)


@dataclass(frozen=True)
class PublishPlan:
    destination: Destination
    changes: ChangeSet
    already_published: int  # leading commits the fork branch already has
    open_mr: str | None  # an open merge request from the branch, if one exists

    @property
    def pending(self) -> tuple[Commit, ...]:
        return self.changes.commits[self.already_published :]


@dataclass(frozen=True)
class Published:
    commits: tuple[str, ...]  # the fork's ids of the commits made
    merge_request: str


def resolve_destination(
    issue: Issue,
    forge: GitLab,
    *,
    branch: str | None = None,
    target_branch: str | None = None,
) -> Destination:
    """Read the canonical project, the issue fork and their branches (anonymously)."""
    issue_title = fetch_issue_title(issue)
    canonical = forge.project(issue.canonical_path)
    if canonical is None:
        raise PublishRefused(f"{issue.canonical_path} does not exist on the forge")
    fork = forge.project(issue.fork_path)
    if fork is None:
        raise PublishRefused(
            f"issue #{issue.nid} has no issue fork ({issue.fork_path}): use 'Create issue fork' "
            f"on {issue.url}, then publish again"
        )
    if fork.path.lower() != issue.fork_path.lower() or fork.forked_from != canonical.id:
        raise PublishRefused(f"{fork.path} is not the issue fork of {canonical.path}")
    target = target_branch or canonical.default_branch
    name = branch or branch_slug(issue.nid, issue_title)
    for what, value in (("target branch", target), ("fork branch", name)):
        problem = branch_problem(value) if value else "empty"
        if problem:
            raise PublishRefused(f"the {what} {one_line(value)!r} is not usable: {problem}")
    target_tip = forge.branch_tip(canonical.id, target)
    if target_tip is None:
        raise PublishRefused(f"{canonical.path} has no branch {target}")
    return Destination(
        issue, issue_title, canonical, fork, target, target_tip, name,
        forge.branch_tip(fork.id, name),
    )  # fmt: skip


def match_fork(dest: Destination, changes: ChangeSet, forge: GitLab) -> PublishPlan:
    """Match the fork branch against the change set; refuse if it went elsewhere."""
    if not changes.commits:
        raise PublishRefused(
            f"the checkout has no commits that {dest.canonical.path} {dest.target_branch} lacks"
        )
    done = 0
    if dest.branch_tip is not None:
        on_fork = forge.commits_between(
            dest.fork.id, dest.target_tip, dest.branch, dest.canonical.id
        )
        ours = changes.commits
        if len(on_fork) > len(ours) or any(
            not _same(remote, mine) for remote, mine in zip(on_fork, ours, strict=False)
        ):
            raise PublishRefused(
                f"the fork branch {dest.branch} has {len(on_fork)} commits that are not the "
                f"guest's first {len(on_fork)}: it has diverged. Publish to another --branch, "
                f"or bring the guest's checkout in line with it first."
            )
        done = len(on_fork)
        if done == 0 and ours and ours[0].parent != dest.branch_tip:
            raise PublishRefused(
                f"the fork branch {dest.branch} exists at {dest.branch_tip[:12]}, which is not "
                f"where the guest's commits start ({ours[0].parent[:12]}); publish to another "
                f"--branch, or rebase in the guest"
            )
    mrs = forge.open_merge_requests(dest.fork.id, dest.branch)
    url = next((one_line(str(m.get("web_url")), 500) for m in mrs if isinstance(m, dict)), None)
    return PublishPlan(dest, changes, done, url)


async def prepare(
    runner: GuestRunner,
    checkout: str,
    issue: Issue,
    forge: GitLab,
    *,
    branch: str | None = None,
    target_branch: str | None = None,
) -> PublishPlan:
    """Read the destination (host, anonymous), then the change set (guest), then match them."""
    dest = await asyncio.to_thread(
        resolve_destination, issue, forge, branch=branch, target_branch=target_branch
    )
    try:
        changes = await collect(runner, checkout, dest.target_tip)
    except MissingBase:
        raise PublishRefused(
            f"the guest's checkout {checkout} does not have {dest.canonical.path} "
            f"{dest.target_branch} as it is now ({dest.target_tip[:12]}): run git fetch in the "
            f"guest (and rebase onto it), then publish again"
        ) from None
    return await asyncio.to_thread(match_fork, dest, changes, forge)


def _same(remote: Any, mine: Commit) -> bool:
    if not isinstance(remote, dict):
        return False
    return (
        str(remote.get("message", "")).strip() == mine.message.strip()
        and remote.get("author_name") == mine.author_name
        and remote.get("author_email") == mine.author_email
    )


def render_publish(plan: PublishPlan) -> str:
    """Everything a person must read before saying yes: where, then every byte of what."""
    d = plan.destination
    lines = [
        "Destination (decided on this host):",
        f"  issue          {d.issue.url}",
        f"  fork           {d.fork.path}",
        f"  branch         {d.branch} "
        + (
            f"(exists at {d.branch_tip[:12]}; {plan.already_published} of these commits are there)"
            if d.branch_tip
            else "(new)"
        ),
        f"  merge into     {d.canonical.path} {d.target_branch}",
        "  merge request  "
        + (f"already open: {plan.open_mr}" if plan.open_mr else f"new, titled {d.mr_title!r}"),
        "",
        f"Content (decided by the guest: {len(plan.pending)} commits, "
        f"{sum(len(a.content or b'') for c in plan.pending for a in c.actions)} bytes):",
    ]
    for i, commit in enumerate(plan.pending, 1):
        lines += [
            "",
            f"commit {i}/{len(plan.pending)} {commit.sha[:12]}",
            f"  author   {one_line(commit.author_name)} <{one_line(commit.author_email)}>",
            "  message",
            *(f"    | {line}" for line in visible(commit.message.rstrip("\n")).split("\n")),
        ]
        for action in commit.actions:
            lines += _render_action(action)
    return "\n".join(lines) + "\n"


def _render_action(a: FileAction) -> list[str]:
    path = visible(a.path)
    if a.action == "chmod":
        return [f"  chmod    {path} ({'+x' if a.executable else '-x'})"]
    if a.action == "delete":
        return [f"  delete   {path}"]
    data = a.content or b""
    head = f"  {a.action:<8} {path} ({len(data)} bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        return [f"{head}: binary, sha256 {hashlib.sha256(data).hexdigest()}"]
    return [head, *(f"    | {line}" for line in visible(text).split("\n"))]


def execute(plan: PublishPlan, forge: GitLab, out: TextIO, *, vm: str = "") -> Published:
    """Write: one commit call per pending commit, then the merge request; what was
    written (or how far it got) goes to the host's audit trail."""
    d = plan.destination
    if forge.branch_tip(d.fork.id, d.branch) != d.branch_tip:
        raise ForkMoved(f"the fork branch {d.branch} moved since it was read; nothing was written")
    made: list[str] = []
    url: str | None = None
    try:
        url = _write(plan, forge, out, made)
    finally:
        record(
            "publish",
            vm=vm,
            issue=d.issue.nid,
            destination=d.fork.path,
            canonical=d.canonical.path,
            branch=d.branch,
            commits=[
                {"guest_sha": c.sha, "subject": c.subject, "files": [a.path for a in c.actions]}
                for c in plan.pending[: len(made)]
            ],
            made=made,
            merge_request=url,
            ok=url is not None,
        )
    assert url is not None  # _write returned
    return Published(tuple(made), url)


def _write(plan: PublishPlan, forge: GitLab, out: TextIO, made: list[str]) -> str:
    d = plan.destination
    start = d.branch_tip is None
    for i, commit in enumerate(plan.pending, 1):
        body: dict[str, Any] = {
            "branch": d.branch,
            "commit_message": commit.message,
            "author_name": commit.author_name,
            "author_email": commit.author_email,
            "actions": [_action_json(a) for a in commit.actions],
        }
        if start and i == 1:
            # A new branch starts at the guest commit's own parent, in the canonical project.
            body.update(start_sha=commit.parent, start_project=d.canonical.id)
        try:
            made.append(forge.create_commit(d.fork.id, body))
        except ForgeError as exc:
            raise type(exc)(
                f"{exc}\n{len(made)} of {len(plan.pending)} commits were published before this "
                f"failure; running sand publish again continues from there"
            ) from None
        print(f"published {i}/{len(plan.pending)}: {commit.subject}", file=out)
    url = plan.open_mr
    if url is None:
        url = forge.create_merge_request(
            d.fork.id,
            {
                "source_branch": d.branch,
                "target_branch": d.target_branch,
                "target_project_id": d.canonical.id,
                "title": d.mr_title,
            },
        )
        url = one_line(url, 500)
        print(f"opened merge request: {url}", file=out)
    else:
        print(f"merge request already open: {url}", file=out)
    return url


def _action_json(a: FileAction) -> dict[str, Any]:
    out: dict[str, Any] = {"action": a.action, "file_path": a.path}
    if a.action in ("create", "update"):
        out.update(content=base64.b64encode(a.content or b"").decode(), encoding="base64")
    elif a.action == "chmod":
        out["execute_filemode"] = bool(a.executable)
    return out


def confirm_and_execute(
    plan: PublishPlan, token_forge: GitLab, *, out: TextIO, confirm: Confirm, vm: str = ""
) -> Published | None:
    """Show the plan, ask, then write; None when the person did not confirm."""
    if not plan.pending and plan.open_mr:
        print(
            f"Nothing to publish: the fork branch has every commit and {plan.open_mr} is open.",
            file=out,
        )
        return Published((), plan.open_mr)
    out.write(render_publish(plan))
    if plan.changes.size > WARN_BYTES:
        print(f"\nwarning: this publishes {plan.changes.size} bytes of file content", file=out)
    question = (
        f"\nPublish {len(plan.pending)} commits to {plan.destination.fork.path} "
        f"{plan.destination.branch}"
        + ("" if plan.open_mr else " and open a merge request")
        + "? Only 'yes' will be accepted."
    )
    if not confirm(question):
        print("Not confirmed; nothing was published.", file=out)
        return None
    return execute(plan, token_forge, out, vm=vm)
