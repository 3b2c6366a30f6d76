"""GitHub on the host side of landing: compare URLs and the workstation's ``gh``.

``gh`` runs with an argv array only -- never a shell -- with every value that
came from the guest already validated (the branch by :mod:`sand.refname`,
the repository by :mod:`sand.guest.remotes`' strict pattern), passed as ``--flag=value`` so no
value can be read as another option, from a scratch working directory so the
checkout sand happens to run in never becomes gh's context, and with prompts
off: gh uses the person's own credential, which never meets the guest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from sand.errors import ErrorLayer, SandError
from sand.guest.remotes import Repo
from sand.terminal import one_line, visible

_PR_URL = re.compile(r"^https://github\.com/([^/\s]+/[^/\s]+)/pull/([1-9][0-9]{0,9})$")


class GhError(SandError):
    """The workstation's gh is missing, not logged in, or refused a request."""

    layer = ErrorLayer.GH


@dataclass(frozen=True)
class PullRequest:
    number: int
    state: str  # open | closed | merged
    draft: bool
    url: str

    def describe(self) -> str:
        return f"#{self.number} {self.state}" + (" (draft)" if self.draft else "")

    def to_json(self) -> dict[str, object]:
        return {"number": self.number, "state": self.state, "draft": self.draft, "url": self.url}


def compare_url(repo: Repo, branch: str) -> str:
    """GitHub's "open a pull request" page for ``branch`` (already validated)."""
    return f"https://github.com/{repo.slug}/pull/new/{quote(branch, safe='/')}"


class Gh:
    """The workstation's own ``gh``; find one with :meth:`find`."""

    def __init__(self, executable: str, env: Mapping[str, str] | None = None) -> None:
        self.executable = executable
        base = dict(os.environ if env is None else env)
        base.update(GH_PROMPT_DISABLED="1", GH_NO_UPDATE_NOTIFIER="1", NO_COLOR="1")
        self.env = base

    @classmethod
    def find(cls) -> Gh | None:
        path = shutil.which("gh")
        return cls(path) if path else None

    def run(self, args: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="sand-gh-") as scratch:
            try:
                return subprocess.run(
                    [self.executable, *args],
                    cwd=scratch,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=timeout,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise GhError(f"running gh failed: {exc}") from None

    def authenticated(self) -> bool:
        return self.run(["auth", "status", "--hostname=github.com"]).returncode == 0

    def find_pr(self, repo: Repo, branch: str) -> PullRequest | None:
        """The open PR for ``branch`` if there is one, else its most recent one."""
        res = self.run(
            [
                "pr", "list", f"--repo={repo.slug}", f"--head={branch}", "--state=all",
                "--json=number,state,isDraft,url", "--limit=20",
            ]
        )  # fmt: skip
        if res.returncode != 0:
            raise GhError(f"gh pr list for {repo.slug} failed: {one_line(res.stderr)}")
        try:
            rows = json.loads(res.stdout)
        except ValueError:
            raise GhError(
                f"gh pr list for {repo.slug} printed something that is not JSON"
            ) from None
        prs = [pr for row in rows if (pr := _pr_from_row(repo, row)) is not None]
        if not prs:
            return None
        return next((pr for pr in prs if pr.state == "open"), max(prs, key=lambda p: p.number))

    def head_message(self, repo: Repo, branch: str) -> str:
        """The message of the pushed branch's head commit, as GitHub has it."""
        res = self.run(["api", f"repos/{repo.slug}/commits/{quote(branch, safe='/')}"])
        if res.returncode != 0:
            raise GhError(
                f"gh could not read branch {branch!r} of {repo.slug} (is it pushed?): "
                f"{one_line(res.stderr)}"
            )
        try:
            message = json.loads(res.stdout)["commit"]["message"]
        except (ValueError, KeyError, TypeError):
            raise GhError(f"gh api for {repo.slug} answered without a commit message") from None
        if not isinstance(message, str):
            raise GhError(f"gh api for {repo.slug} answered without a commit message")
        return message

    def create_draft_pr(self, repo: Repo, branch: str, title: str, body: str) -> PullRequest:
        res = self.run(
            [
                "pr", "create", f"--repo={repo.slug}", f"--head={branch}", "--draft",
                f"--title={title}", f"--body={body}",
            ],
            timeout=120,
        )  # fmt: skip
        if res.returncode != 0:
            raise GhError(f"gh pr create for {repo.slug} failed: {one_line(res.stderr, 400)}")
        for line in reversed(res.stdout.split()):
            m = _PR_URL.match(line.strip())
            if m and m[1].lower() == repo.slug.lower():
                return PullRequest(int(m[2]), "open", True, line.strip())
        raise GhError(f"gh pr create for {repo.slug} did not print the new PR's URL")


def _pr_from_row(repo: Repo, row: object) -> PullRequest | None:
    if not isinstance(row, dict):
        return None
    number, state, draft, url = (
        row.get("number"),
        row.get("state"),
        row.get("isDraft"),
        row.get("url"),
    )
    if not (isinstance(number, int) and number > 0 and isinstance(url, str)):
        return None
    m = _PR_URL.match(url)
    if m is None or m[1].lower() != repo.slug.lower():
        return None
    state = str(state).lower()
    if state not in ("open", "closed", "merged"):
        return None
    return PullRequest(number, state, bool(draft), url)


def pr_title_and_body(message: str, vm: str) -> tuple[str, str]:
    """A draft PR's title and body from the head commit's message."""
    first, _, rest = message.strip().partition("\n")
    title = one_line(first, 200) or "Draft from sand"
    body = visible(rest.strip())  # an argv can hold no NUL; escapes stay visible on the page
    footer = f"Opened as a draft by `sand land` for VM {vm}."
    return title, f"{body}\n\n{footer}" if body else footer
