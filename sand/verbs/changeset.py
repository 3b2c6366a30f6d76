"""What ``sand publish`` takes from a guest: an inert change set, and how it is read.

The guest decides *what* changes -- commits, messages, authors, file contents
-- and nothing else: :class:`ChangeSet` has no field that could name a
project, a fork, a branch, a URL or a credential, so no guest output can say
where it lands (that is :mod:`sand.verbs.publish`'s job, from the issue URL a
person gave on the host). Everything is read with fixed git plumbing in the
guest and parsed here from git's own object format, with each object's hash
re-computed, every path checked (:func:`check_repo_path`) and merge commits,
symlinks and submodules refused -- by name -- rather than flattened.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from sand.errors import ErrorLayer, GuestCommandError, SandError
from sand.guest.runner import EXPAND, GuestRunner, failed, guest_path_arg
from sand.refname import is_object_id
from sand.terminal import one_line

MAX_COMMITS = 200
MAX_BYTES = 300 << 20  # all file contents together; more is refused
WARN_BYTES = 20 << 20
MAX_PATH = 4096

_AUTHOR = re.compile(rb"^author (.*) <([^<>\n]*)> [0-9]+ [+-][0-9]{4}$")
_RAW = re.compile(rb"^:([0-7]{6}) ([0-7]{6}) ([0-9a-f]{40,64}) ([0-9a-f]{40,64}) ([A-Z])[0-9]*$")
_FILE, _EXEC, _LINK, _GITLINK = "100644", "100755", "120000", "160000"


class ChangeSetError(SandError):
    """The guest's commits cannot be published as they are (nothing was sent)."""

    layer = ErrorLayer.PUBLISH


@dataclass(frozen=True)
class FileAction:
    action: str  # create | update | delete | chmod
    path: str  # checked by check_repo_path
    content: bytes | None = field(default=None, repr=False)  # create and update only
    executable: bool | None = None  # chmod only


@dataclass(frozen=True)
class Commit:
    sha: str
    parent: str
    message: str
    author_name: str
    author_email: str
    actions: tuple[FileAction, ...]

    @property
    def subject(self) -> str:
        return one_line(self.message.partition("\n")[0], 72)


@dataclass(frozen=True)
class ChangeSet:
    """Commits in order, oldest first, each the parent of the next."""

    commits: tuple[Commit, ...]

    @property
    def size(self) -> int:
        return sum(len(a.content or b"") for c in self.commits for a in c.actions)


def check_repo_path(path: str) -> str:
    """``path`` if it is a plain path inside a repository; refuse anything else."""
    problem = _path_problem(path)
    if problem:
        raise ChangeSetError(f"refusing file path {one_line(path)!r}: {problem}")
    return path


def _path_problem(path: str) -> str | None:
    if not path:
        return "it is empty"
    if len(path) > MAX_PATH:
        return "it is too long"
    if not path.isprintable():
        return "it contains a control or invisible character"
    if path.startswith("/"):
        return "it is absolute"
    if "\\" in path:
        return "it contains a backslash"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "it has an empty, '.' or '..' component"
        if part.lower().rstrip(". ") == ".git":
            return "it is inside .git"
    return None


def check_sha(text: str) -> str:
    if not is_object_id(text):
        raise ChangeSetError(f"{one_line(text, 80)!r} is not a commit id")
    return text


LIST_SCRIPT = (
    EXPAND
    + r"""
set -u
export GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 LC_ALL=C
IFS= read -r -d '' p && IFS= read -r -d '' base || { echo "truncated request" >&2; exit 2; }
cd -- "$(expand "$p")" 2>/dev/null || { echo "no checkout at $p" >&2; exit 3; }
git rev-parse -q --verify 'HEAD^{commit}' >/dev/null || { echo "$p has no commits" >&2; exit 3; }
git cat-file -e "$base^{commit}" 2>/dev/null || exit 4
exec git rev-list --reverse --topo-order --max-count=__MAX__ HEAD --not "$base"
""".replace("__MAX__", str(MAX_COMMITS + 1))
)

BATCH_SCRIPT = (
    EXPAND
    + r"""
IFS= read -r -d '' p || exit 2
cd -- "$(expand "$p")" || exit 3
exec git cat-file --batch
"""
)

DIFF_SCRIPT = (
    EXPAND
    + r"""
IFS= read -r -d '' p && IFS= read -r -d '' parent && IFS= read -r -d '' commit || exit 2
cd -- "$(expand "$p")" || exit 3
exec git diff-tree -r -z --no-renames --raw "$parent" "$commit"
"""
)


class MissingBase(ChangeSetError):
    """The guest lacks the base commit the host asked it to compare against."""


@dataclass(frozen=True)
class _Header:
    sha: str
    parents: list[str]
    author_name: str
    author_email: str
    message: str


# (action, path, blob whose content the action sends or "", executable for chmod)
_Entry = tuple[str, str, str, bool | None]


async def collect(runner: GuestRunner, checkout: str, base: str) -> ChangeSet:
    """The checkout's commits that ``base`` does not have, as inert data."""
    check_sha(base)
    path = guest_path_arg(checkout)
    res = await runner.run(LIST_SCRIPT, stdin=path + base.encode() + b"\0", limit=1 << 20)
    if res.exit_status == 4:
        raise MissingBase(f"the guest's checkout {checkout} does not have commit {base}")
    if res.exit_status != 0:
        raise failed("list commits to publish", res)
    shas = [check_sha(s) for s in res.stdout.decode("ascii", "replace").split()]
    if len(shas) > MAX_COMMITS:
        raise ChangeSetError(f"more than {MAX_COMMITS} commits to publish; publish fewer at a time")
    raw = await _batch(runner, path, shas, "commit", 64 << 20)
    headers = [_parse_commit(sha, raw[sha]) for sha in shas]
    merges = [
        f"{h.sha[:12]} {one_line(h.message.partition(chr(10))[0], 60)}"
        for h in headers
        if len(h.parents) > 1
    ]
    if merges:
        raise ChangeSetError(
            "refusing merge commits (rebase them away in the guest first): " + "; ".join(merges)
        )
    entries: list[list[_Entry]] = []
    for i, h in enumerate(headers):
        if not h.parents:
            raise ChangeSetError(
                f"commit {h.sha[:12]} has no parent: it is not based on the project"
            )
        if i and h.parents[0] != headers[i - 1].sha:
            raise ChangeSetError(f"commit {h.sha[:12]} does not follow the one before it")
        diff = await runner.run(DIFF_SCRIPT, stdin=path + f"{h.parents[0]}\0{h.sha}\0".encode())
        if diff.exit_status != 0:
            raise failed(f"read the changes of {h.sha[:12]}", diff)
        entries.append(_actions(h.sha, diff.stdout))
        if not entries[-1]:
            raise ChangeSetError(f"commit {h.sha[:12]} changes no files")
    blobs = sorted({blob for commit in entries for _, _, blob, _ in commit if blob})
    contents = await _batch(runner, path, blobs, "blob", MAX_BYTES + (1 << 20))
    changes = ChangeSet(
        tuple(
            Commit(
                h.sha,
                h.parents[0],
                h.message,
                h.author_name,
                h.author_email,
                tuple(
                    FileAction(kind, p, contents[b] if b else None, exe) for kind, p, b, exe in e
                ),
            )
            for h, e in zip(headers, entries, strict=True)
        )
    )
    if changes.size > MAX_BYTES:
        raise ChangeSetError(f"the change set holds {changes.size} bytes; the limit is {MAX_BYTES}")
    return changes


async def _batch(
    runner: GuestRunner, path: bytes, shas: list[str], kind: str, limit: int
) -> dict[str, bytes]:
    if not shas:
        return {}
    stdin = path + "".join(f"{s}\n" for s in shas).encode()
    res = await runner.run(BATCH_SCRIPT, stdin=stdin, limit=limit, timeout=600)
    if res.exit_status != 0:
        raise failed(f"read {kind} objects", res)
    return parse_batch(res.stdout, shas, kind)


def parse_batch(raw: bytes, shas: list[str], kind: str) -> dict[str, bytes]:
    """``git cat-file --batch`` output for ``shas``, each object's hash re-checked."""
    out: dict[str, bytes] = {}
    pos = 0
    for sha in shas:
        nl = raw.find(b"\n", pos)
        header = raw[pos:nl].split(b" ") if nl >= 0 else []
        if len(header) != 3 or header[0] != sha.encode() or header[1] != kind.encode():
            raise _malformed(f"no {kind} {sha[:12]} where it was expected")
        if not header[2].isdigit():
            raise _malformed(f"a bad size for {sha[:12]}")
        size = int(header[2])
        body = raw[nl + 1 : nl + 1 + size]
        if len(body) != size or raw[nl + 1 + size : nl + 2 + size] != b"\n":
            raise _malformed(f"{kind} {sha[:12]} is truncated")
        algo = hashlib.sha1 if len(sha) == 40 else hashlib.sha256
        if algo(b"%s %d\0" % (kind.encode(), size) + body).hexdigest() != sha:
            raise _malformed(f"{kind} {sha[:12]} does not hash to its id")
        out[sha] = body
        pos = nl + 2 + size
    if pos != len(raw):
        raise _malformed("it carries more than was asked for")
    return out


def _parse_commit(sha: str, raw: bytes) -> _Header:
    header, sep, body = raw.partition(b"\n\n")
    parents: list[str] = []
    author: tuple[str, str] | None = None
    for line in header.split(b"\n"):
        if line.startswith(b"parent "):
            parents.append(check_sha(line[7:].decode("ascii", "replace")))
        elif line.startswith(b"author "):
            m = _AUTHOR.match(line)
            if m is None:
                raise ChangeSetError(f"commit {sha[:12]} has an author line sand cannot read")
            author = (_text(sha, "author name", m[1]), _text(sha, "author email", m[2]))
        elif line.startswith(b"encoding ") and line[9:].strip().lower() not in (b"utf-8", b"utf8"):
            raise ChangeSetError(f"commit {sha[:12]} is not UTF-8 encoded")
    if author is None or not sep:
        raise ChangeSetError(f"commit {sha[:12]} has no author or no message")
    try:
        message = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ChangeSetError(f"commit {sha[:12]}'s message is not UTF-8") from None
    if "\0" in message or not message.strip():
        raise ChangeSetError(f"commit {sha[:12]}'s message is empty or holds a NUL")
    return _Header(sha, parents, author[0], author[1], message)


def _text(sha: str, what: str, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not text or len(text) > 255 or not text.isprintable():
        raise ChangeSetError(f"commit {sha[:12]} has an empty or unprintable {what}")
    return text


def _actions(sha: str, raw: bytes) -> list[_Entry]:
    """The file actions of one commit, from ``git diff-tree -z --raw``."""
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % 2:
        raise _malformed(f"the changes of {sha[:12]} are cut short")
    out: list[_Entry] = []
    for meta, raw_path in zip(fields[::2], fields[1::2], strict=True):
        m = _RAW.match(meta)
        if m is None:
            raise _malformed(f"a change line of {sha[:12]} sand cannot read")
        old_mode, new_mode, _old, new, status = (g.decode() for g in m.groups())
        try:
            path = check_repo_path(raw_path.decode("utf-8"))
        except UnicodeDecodeError:
            raise ChangeSetError(f"commit {sha[:12]} has a file path that is not UTF-8") from None
        where = f"commit {sha[:12]}: {path}"
        if status == "A":
            _plain(where, new_mode)
            out.append(("create", path, new, None))
            if new_mode == _EXEC:
                out.append(("chmod", path, "", True))
        elif status == "D":
            if old_mode == _GITLINK:
                raise ChangeSetError(f"{where} removes a submodule; sand does not publish those")
            out.append(("delete", path, "", None))
        elif status == "M":
            _plain(where, old_mode)
            _plain(where, new_mode)
            if _old != new:
                out.append(("update", path, new, None))
            if old_mode != new_mode:
                out.append(("chmod", path, "", new_mode == _EXEC))
        elif status == "T":
            raise ChangeSetError(f"{where} changes the file's type; sand does not publish that")
        else:
            raise ChangeSetError(f"{where} has a change of kind {status} sand does not publish")
    return out


def _plain(where: str, mode: str) -> None:
    if mode == _LINK:
        raise ChangeSetError(f"{where} is a symlink; sand publishes regular files only")
    if mode == _GITLINK:
        raise ChangeSetError(f"{where} is a submodule; sand publishes regular files only")
    if mode not in (_FILE, _EXEC):
        raise ChangeSetError(f"{where} has file mode {mode}; sand publishes regular files only")


def _malformed(why: str) -> GuestCommandError:
    return GuestCommandError("read commits", 0, f"the guest's reply was refused: {why}")
