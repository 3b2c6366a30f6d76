"""Reading a change set from a guest checkout: real git, then hostile replies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sand.verbs.changeset import (
    BATCH_SCRIPT,
    DIFF_SCRIPT,
    LIST_SCRIPT,
    ChangeSet,
    ChangeSetError,
    Commit,
    FileAction,
    MissingBase,
    check_repo_path,
    collect,
)
from tests.verbs.helpers import LocalRunner, ScriptedRunner, git


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def repo_with_base(home: Path) -> tuple[Path, str]:
    repo = home / "src" / "widget"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "1.0.x")
    (repo / "keep.txt").write_text("keep\n")
    (repo / "old.txt").write_text("old\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    return repo, git(repo, "rev-parse", "HEAD")


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


async def test_commits_after_the_base_become_file_actions(home: Path) -> None:
    repo, base = repo_with_base(home)
    (repo / "new dir").mkdir()
    (repo / "new dir" / "a.bin").write_bytes(b"\x00\x01binary")
    (repo / "tool").write_text("#!/bin/sh\necho hi\n")
    (repo / "tool").chmod(0o755)
    first = commit_all(repo, "Add things\n\nWith a body.")
    (repo / "keep.txt").write_text("kept, changed\n")
    (repo / "old.txt").unlink()
    (repo / "run.sh").chmod(0o755)
    second = commit_all(repo, "Change things")

    changes = await collect(LocalRunner(home), "~/src/widget", base)
    assert [c.sha for c in changes.commits] == [first, second]
    c1, c2 = changes.commits
    assert c1.parent == base and c2.parent == first
    assert c1.message == "Add things\n\nWith a body.\n"
    assert (c1.author_name, c1.author_email) == ("Agent", "agent@example.test")
    assert [(a.action, a.path, a.content, a.executable) for a in c1.actions] == [
        ("create", "new dir/a.bin", b"\x00\x01binary", None),
        ("create", "tool", b"#!/bin/sh\necho hi\n", None),
        ("chmod", "tool", None, True),
    ]
    assert [(a.action, a.path, a.content, a.executable) for a in c2.actions] == [
        ("update", "keep.txt", b"kept, changed\n", None),
        ("delete", "old.txt", None, None),
        ("chmod", "run.sh", None, True),
    ]
    assert changes.size == len(b"\x00\x01binary#!/bin/sh\necho hi\nkept, changed\n")


async def test_nothing_after_the_base_is_an_empty_change_set(home: Path) -> None:
    _, base = repo_with_base(home)
    assert (await collect(LocalRunner(home), "~/src/widget", base)).commits == ()


async def test_a_base_the_guest_lacks_is_reported(home: Path) -> None:
    repo_with_base(home)
    with pytest.raises(MissingBase):
        await collect(LocalRunner(home), "~/src/widget", "0" * 40)


async def test_merge_commits_are_refused_by_name(home: Path) -> None:
    repo, base = repo_with_base(home)
    git(repo, "checkout", "-qb", "side")
    (repo / "side.txt").write_text("s\n")
    commit_all(repo, "side work")
    git(repo, "checkout", "-q", "1.0.x")
    (repo / "main.txt").write_text("m\n")
    commit_all(repo, "main work")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge the side work", "side")
    merge = git(repo, "rev-parse", "HEAD")
    with pytest.raises(ChangeSetError, match=rf"merge commits.*{merge[:12]} Merge the side work"):
        await collect(LocalRunner(home), "~/src/widget", base)


async def test_symlinks_and_submodules_are_refused(home: Path, tmp_path: Path) -> None:
    repo, base = repo_with_base(home)
    (repo / "link").symlink_to("/etc/passwd")
    commit_all(repo, "a link")
    with pytest.raises(ChangeSetError, match="link is a symlink"):
        await collect(LocalRunner(home), "~/src/widget", base)
    git(repo, "reset", "-q", "--hard", base)
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    git(sub, "commit", "-q", "--allow-empty", "-m", "s")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(sub, 'rev-parse', 'HEAD')},mod")
    git(repo, "commit", "-qm", "a submodule")
    with pytest.raises(ChangeSetError, match="mod is a submodule"):
        await collect(LocalRunner(home), "~/src/widget", base)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../b", "'..'"),
        ("a//b", "empty"),
        ("./a", "'.'"),
        (".git/config", ".git"),
        ("sub/.git/hooks/post-checkout", ".git"),
        (".GIT/config", ".git"),
        (".git./config", ".git"),
        ("a\\..\\b", "backslash"),
        ("a\nb", "control"),
        ("a\u202eb", "control"),
    ],
)
def test_repository_paths_are_checked(path: str, why: str) -> None:
    with pytest.raises(ChangeSetError, match=why):
        check_repo_path(path)


@pytest.mark.parametrize("path", ["a", "a/b.txt", ".gitignore", "dir/.github/x", "x.git", "é"])
def test_plain_repository_paths_pass(path: str) -> None:
    assert check_repo_path(path) == path


SHA_A, BASE = "a" * 40, "c" * 40


def hostile(diff: bytes, *, sha: str | None = None) -> ScriptedRunner:
    """A guest whose one commit's diff is ``diff`` (hashes made to match)."""
    import hashlib

    body = (
        b"tree " + b"d" * 40 + b"\nparent " + BASE.encode() + b"\n"
        b"author A <a@x> 1700000000 +0000\ncommitter A <a@x> 1700000000 +0000\n\nm\n"
    )
    real = sha or hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
    return ScriptedRunner(
        {
            LIST_SCRIPT: [real.encode() + b"\n"],
            BATCH_SCRIPT: [f"{real} commit {len(body)}\n".encode() + body + b"\n"],
            DIFF_SCRIPT: [diff],
        }
    )


@pytest.mark.parametrize(
    "path", [b"../../.ssh/authorized_keys", b"/etc/cron.d/x", b".git/hooks/pre-commit"]
)
async def test_hostile_paths_from_the_guest_are_refused(path: bytes) -> None:
    entry = b":000000 100644 " + b"0" * 40 + b" " + b"e" * 40 + b" A\0" + path + b"\0"
    with pytest.raises(ChangeSetError, match="refusing file path"):
        await collect(hostile(entry), "~/src/widget", BASE)


async def test_a_reply_that_does_not_hash_to_its_id_is_refused() -> None:
    runner = hostile(b"", sha=SHA_A)
    with pytest.raises(Exception, match="does not hash"):
        await collect(runner, "~/src/widget", BASE)


async def test_a_malformed_diff_is_refused() -> None:
    with pytest.raises(Exception, match="refused"):
        await collect(hostile(b":garbage\0x\0"), "~/src/widget", BASE)


def test_the_change_set_has_no_field_that_could_name_a_destination() -> None:
    names = {
        cls.__name__: {f.name for f in dataclasses.fields(cls)}
        for cls in (ChangeSet, Commit, FileAction)
    }
    assert names == {
        "ChangeSet": {"commits"},
        "Commit": {"sha", "parent", "message", "author_name", "author_email", "actions"},
        "FileAction": {"action", "path", "content", "executable"},
    }
