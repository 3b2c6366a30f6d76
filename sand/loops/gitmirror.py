"""The repository ``sand sync`` follows: a shallow mirror in sand's state dir.

One bare repository per (URL, branch) under ``<state>/sync/<key>/repo``. Each fetch
asks the remote for the branch's newest commit only (``--depth 1``), and the
manifest is read straight out of that commit (``git cat-file``): nothing is checked
out, so nothing in the repository runs on this host (no hooks, filters, submodules).

Credentials never reach argv, the URL, or any config file (the rule repos in guests
keep, ``sand/provision/bundle/git-credential-sand``): git runs in ``sand.gitenv``'s
environment (an HTTPS token read from a 0600 file by a credential helper, no helper
the user configured, no prompts). SSH URLs use the host's own ssh and keys, as git does.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sand.errors import ErrorLayer, SandError
from sand.gitenv import ALLOWED_PROTOCOLS, git_env
from sand.state.paths import state_root
from sand.state.private import ensure_private_dir, private_file_problem

FETCH_TIMEOUT = 300.0
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class GitError(SandError):
    """Fetching or reading the repository ``sand sync`` follows failed."""

    layer = ErrorLayer.GIT


def url_problem(url: str) -> str | None:
    """Why ``url`` may not be followed, or None. A URL with a password in it would put
    the credential in argv and in sand's state: the token goes in --token-file."""
    if not url or url.startswith("-") or any(c.isspace() or ord(c) < 32 for c in url):
        return "not a repository URL"
    if "::" in url.split("/")[0]:
        return "a transport::address runs a helper command; give an https or ssh URL"
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ALLOWED_PROTOCOLS.split(":"):
            return f"the {parts.scheme}:// transport is not one sand follows"
        if parts.password is not None:
            return (
                "the URL holds a password (or token): it would be in the process list and "
                "sand's state; put the token in a 0600 file and give --token-file"
            )
    return None


def token_url_problem(url: str) -> str | None:
    """Why a token may not be sent to ``url``, or None: only HTTPS carries it."""
    scheme = urlsplit(url).scheme if "://" in url else "ssh"
    if scheme == "https":
        return None
    if scheme in ("http", "git"):
        return f"would cross the network in clear over {scheme}://; give an https:// URL"
    return f"is for https:// URLs ({scheme} uses the host's own credentials)"


@dataclass(frozen=True)
class Revision:
    sha: str
    subject: str  # the commit's first line, for messages

    @property
    def short(self) -> str:
        return self.sha[:12]


class GitMirror:
    def __init__(self, url: str, branch: str | None, *, token_file: Path | None = None) -> None:
        problem = url_problem(url)
        if problem:
            raise GitError(f"refusing --repo: {problem}")
        if token_file is not None:
            problem = token_url_problem(url)
            if problem:
                raise GitError(f"refusing --token-file: a token {problem}")
            problem = private_file_problem(token_file)
            if problem:
                raise GitError(f"the token file {token_file} {problem}")
        if branch is not None and not _branch_ok(branch):
            raise GitError(f"refusing --branch {branch!r}: not a branch name")
        self.url = url
        self.branch = branch
        self.token_file = token_file
        key = hashlib.sha256(f"{url}\0{branch or ''}".encode()).hexdigest()[:16]
        self.dir = ensure_private_dir(state_root() / "sync" / key, own_from=state_root())
        self.repo = self.dir / "repo"
        self.ref = f"refs/sand/{branch or 'HEAD'}"

    def __repr__(self) -> str:
        return f"GitMirror({self.url!r}, {self.branch or 'HEAD'})"

    def _env(self) -> dict[str, str]:
        return git_env(self.token_file)

    async def _git(self, *args: str, timeout: float = FETCH_TIMEOUT) -> bytes:
        argv = ["git", *args]
        # What the messages name: "git fetch", not the "-C" or "-c" options before it.
        words = args
        while words[:1] in (("-C",), ("-c",)):
            words = words[2:]
        verb = words[0] if words else "git"
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(),
            )
        except FileNotFoundError:
            raise GitError("git is not installed (sand sync needs it on PATH)") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise GitError(f"git {verb} of {self.url} took longer than {timeout:.0f}s") from None
        if proc.returncode != 0:
            tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-4:])
            raise GitError(f"git {verb} of {self.url} failed: {tail or proc.returncode}")
        return out

    async def fetch(self) -> Revision:
        """The branch's newest commit, fetched (only it) into the mirror.

        What a webhook waits for, so it is kept to two git commands: the fetch (its
        automatic housekeeping left to :meth:`tidy`, which runs when nothing is
        waiting) and one ``log`` for the commit and its subject."""
        if not (self.repo / "HEAD").exists():
            await self._git("init", "--bare", "--quiet", str(self.repo))
        source = f"refs/heads/{self.branch}" if self.branch else "HEAD"
        await self._git(
            "-C", str(self.repo), "-c", "maintenance.auto=false", "-c", "gc.auto=0",
            "fetch", "--quiet", "--depth=1", "--no-tags", "--no-recurse-submodules",
            "--", self.url, f"+{source}:{self.ref}",
        )  # fmt: skip
        out = await self._git("-C", str(self.repo), "log", "-1", "--format=%H%n%s", self.ref, "--")
        sha, _, subject = out.decode(errors="replace").partition("\n")
        if not _SHA.match(sha):
            raise GitError(f"{self.url}: {self.ref} is not a commit")
        return Revision(sha, subject.strip()[:200])

    async def tidy(self) -> None:
        """The housekeeping each fetch leaves out (``git gc --auto``: it packs the loose
        objects the fetches wrote once there are many), run when no revision waits."""
        if (self.repo / "HEAD").exists():
            await self._git("-C", str(self.repo), "gc", "--auto", "--quiet")

    async def read(self, revision: Revision, path: str) -> bytes:
        """The file at ``path`` in ``revision``."""
        try:
            return await self._git(
                "-C", str(self.repo), "cat-file", "blob", f"{revision.sha}:{path}"
            )
        except GitError:
            raise GitError(f"revision {revision.short} has no file {path!r}") from None


def _branch_ok(branch: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._/-]+", branch)) and not (
        branch.startswith(("-", "/", ".")) or branch.endswith((".", "/", ".lock")) or ".." in branch
    )
