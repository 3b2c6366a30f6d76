"""``sand land``: a guest's checkouts as a table, and the PR metadata it moves.

The guest is swept read-only (:mod:`sand.guest.sweep`); the host then asks its
own ``gh`` about pull requests, opens a draft PR (``--pr``) or shows the
compare page (``--web``), and appends what it learnt to the landing ledger.
Only metadata crosses: a branch name, a compare URL, a PR number and state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sand.audit.trail import record
from sand.errors import ErrorLayer, SandError
from sand.guest.runner import GuestRunner
from sand.guest.sweep import Checkout, Sweep, sweep
from sand.terminal import one_line
from sand.verbs import ledger
from sand.verbs.github import Gh, GhError, PullRequest, compare_url, pr_title_and_body

Opener = Callable[[str], bool]


class LandRefused(SandError):
    layer = ErrorLayer.LAND


@dataclass(frozen=True)
class Row:
    path: str  # display form, printable
    checkout: Checkout
    compare_url: str | None
    pr: PullRequest | None
    pr_note: str  # the PR cell when there is no PR to describe

    def cells(self) -> tuple[str, str, str, str]:
        c = self.checkout
        if c.branch is not None:
            branch = c.branch
        else:
            branch = "(invalid name)" if c.refused_branch else "(detached)"
        pr = self.pr.describe() if self.pr else self.pr_note
        return self.path, branch, c.push_state(), pr

    def record(self, vm: str, action: str) -> dict[str, Any]:
        c = self.checkout
        return {
            "action": action,
            "vm": vm,
            "path": self.path,
            "branch": c.branch,
            "repo": c.repo.slug if c.repo else None,
            "push": c.push_state(),
            "compare_url": self.compare_url,
            "pr": self.pr.to_json() if self.pr else None,
        }


async def land(
    runner: GuestRunner,
    *,
    vm: str,
    repo_paths: Sequence[str],
    ledger_file: Path,
    gh: Gh | None,
    path: str | None = None,
    open_pr: bool = False,
    web: bool = False,
    out: TextIO = sys.stdout,
    opener: Opener | None = None,
) -> int:
    found = await sweep(runner, repo_paths)
    # --web never calls gh; a plain sweep asks gh only when it is logged in.
    use_gh = gh is not None and not web and gh.authenticated()
    note = "-" if web else ("gh not found" if gh is None else "gh not logged in")
    rows = [_row(found, c, gh if use_gh else None, note) for c in found.checkouts]
    out.write(render(rows, truncated=found.truncated))
    records = [row.record(vm, "sweep") for row in rows]
    try:
        if open_pr or web:
            row = select(rows, path)
            url = row.compare_url or ""
            if web:
                print(url, file=out)
                (opener or open_in_browser)(url)
                records.append(row.record(vm, "web"))
            else:
                records.append(_open_pr(row, vm, gh, out).record(vm, "pr-create"))
    finally:
        ledger.append(ledger_file, records)
        for rec in records:  # what crossed to the host, as the ledger holds it
            record("land." + rec["action"], **{k: v for k, v in rec.items() if k != "action"})
    return 0


def _row(found: Sweep, c: Checkout, gh: Gh | None, note: str) -> Row:
    url = compare_url(c.repo, c.branch) if c.repo and c.branch else None
    if c.why_not_landable() is not None:
        return Row(found.display_path(c), c, url, None, "-")
    pr, cell = None, note
    if gh is not None and c.repo and c.branch:
        try:
            pr = gh.find_pr(c.repo, c.branch)
            cell = "none"
        except GhError:
            cell = "?"
    return Row(found.display_path(c), c, url, pr, cell)


def select(rows: Sequence[Row], path: str | None) -> Row:
    """The checkout ``--pr``/``--web`` act on: the one named, or the only landable one."""
    if path is not None:
        wanted = path.rstrip("/") or "/"
        match = [r for r in rows if wanted in (r.path, r.checkout.path)]
        if not match:
            known = ", ".join(r.path for r in rows) or "none"
            raise LandRefused(f"no checkout {one_line(path)!r} in the guest (found: {known})")
        row = match[0]
        why = row.checkout.why_not_landable()
        if why is not None:
            raise LandRefused(f"{row.path} cannot land: {why}")
        return row
    ready = [r for r in rows if r.checkout.why_not_landable() is None]
    if not ready:
        raise LandRefused("nothing to land: no checkout has a pushed GitHub branch")
    if len(ready) > 1:
        names = ", ".join(r.path for r in ready)
        raise LandRefused(f"several checkouts could land; name one of: {names}")
    return ready[0]


def _open_pr(row: Row, vm: str, gh: Gh | None, out: TextIO) -> Row:
    c = row.checkout
    assert c.repo is not None and c.branch is not None  # select() checked
    if gh is None:
        raise GhError(f"gh is not installed; open the pull request yourself: {row.compare_url}")
    if not gh.authenticated():
        raise GhError(
            f"gh is not logged in (run: gh auth login); or open the pull request yourself: "
            f"{row.compare_url}"
        )
    existing = row.pr or gh.find_pr(c.repo, c.branch)
    if existing is not None and existing.state == "open":
        print(f"{c.repo.slug}: {existing.describe()} is already open: {existing.url}", file=out)
        return Row(row.path, c, row.compare_url, existing, "")
    title, body = pr_title_and_body(gh.head_message(c.repo, c.branch), vm)
    pr = gh.create_draft_pr(c.repo, c.branch, title, body)
    print(f"{c.repo.slug}: opened draft {pr.describe()}: {pr.url}", file=out)
    return Row(row.path, c, row.compare_url, pr, "")


def render(rows: Sequence[Row], *, truncated: bool = False) -> str:
    table = [
        ("PATH", "BRANCH", "PUSH", "PR"),
        *(tuple(one_line(x) for x in r.cells()) for r in rows),
    ]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    text = "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:3])) + "  " + line[3] + "\n"
        for line in table
    )
    if not rows:
        text += "(no git checkouts found in the guest)\n"
    if truncated:
        text += "(more checkouts than the sweep reads; only the first ones are shown)\n"
    return text


def has_display() -> bool:
    if sys.platform == "darwin":
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_in_browser(url: str) -> bool:
    """Open ``url`` (built by sand from validated parts) when a display is there."""
    opener = "open" if sys.platform == "darwin" else "xdg-open"
    path = shutil.which(opener)
    if not has_display() or path is None:
        return False
    subprocess.Popen(
        [path, url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return True
