"""What a guest checkout's remote URL names: a GitHub repository, or nothing sand knows.

The URL is guest data. It is matched whole against the few forms GitHub
serves (https, ``ssh://git@``, ``git@github.com:``) with strict owner and
repository patterns, so what comes out is safe to put in a ``gh`` argv or a
URL; anything else is None, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
_REMOTE = re.compile(
    rf"^(?:https://(?:[^@/\s]+@)?github\.com/|ssh://git@github\.com(?::22)?/|git@github\.com:)"
    rf"(?P<owner>{_OWNER})/(?P<repo>{_REPO})/?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Repo:
    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"


def parse_remote(url: str) -> Repo | None:
    """The GitHub repository a remote URL names, or None for anything else."""
    m = _REMOTE.match(url.strip())
    if m is None:
        return None
    name = m["repo"]
    if name.lower().endswith(".git"):
        name = name[:-4]
    if name in ("", ".", "..") or name.startswith("."):
        return None
    return Repo(m["owner"], name)
