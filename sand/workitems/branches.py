"""The branch generator's work items: a repository's branches matching a pattern.

One ``git ls-remote --heads`` per plan, in ``sand.gitenv``'s environment (no prompt,
no user helper, no ``ext::``); nothing is fetched or checked out on this host. The
URL is the manifest's (checked at validate time) and goes after ``--``; what comes
back is data: a branch git itself would refuse to check out (``sand.refname``) is
kept as an item only to be refused, named, in the plan.
"""

from __future__ import annotations

import fnmatch
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from sand.desired.generated import WorkItem
from sand.errors import ErrorLayer, SandError
from sand.gitenv import git_env
from sand.state.private import ensure_private_dir, write_private_file

LIST_TIMEOUT = 60.0
HEADS = "refs/heads/"


class WorkItemError(SandError):
    """A generator's work items could not be read: nothing is planned from a guess."""

    layer = ErrorLayer.GENERATOR


def branch_items(
    url: str, match: str, *, generator: str, token: str | None = None, scratch: Path | None = None
) -> list[WorkItem]:
    """The branches of ``url`` whose names match ``match`` (fnmatch, case-sensitive).
    ``token``: the repository's token (HTTPS only), handed to git's credential helper
    in a 0600 file under ``scratch`` (a private directory) for this one call."""
    if token is None:
        return _listed(url, match, generator, git_env())
    if urlsplit(url).scheme != "https":
        raise WorkItemError(f"generator {generator}: a repository token goes over https:// only")
    with tempfile.TemporaryDirectory(dir=ensure_private_dir(scratch or Path("."))) as tmp:
        token_file = Path(tmp) / "token"
        write_private_file(token_file, token.encode())
        return _listed(url, match, generator, git_env(token_file))


def _listed(url: str, match: str, generator: str, env: dict[str, str]) -> list[WorkItem]:
    argv = ["git", "ls-remote", "--heads", "--", url]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=LIST_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise WorkItemError(f"generator {generator}: git is not installed") from None
    except subprocess.TimeoutExpired:
        raise WorkItemError(
            f"generator {generator}: listing the branches of {url} took longer than "
            f"{LIST_TIMEOUT:.0f}s"
        ) from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.decode(errors="replace").split())[-300:]
        raise WorkItemError(
            f"generator {generator}: cannot list the branches of {url}: "
            f"{tail or f'git exited {done.returncode}'}"
        )
    items: list[WorkItem] = []
    for line in done.stdout.split(b"\n"):
        _, tab, ref = line.partition(b"\t")
        if not tab or not ref.startswith(HEADS.encode()):
            continue
        branch = ref[len(HEADS) :].decode("utf-8", "surrogateescape")
        if fnmatch.fnmatchcase(branch, match):
            items.append(WorkItem(key=branch, branch=branch))
    return items
