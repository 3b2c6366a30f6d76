"""The landing sweep, against real git checkouts (host bash standing in for the guest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sand.errors import GuestCommandError
from sand.guest.remotes import Repo
from sand.guest.sweep import MAX_CHECKOUTS, parse_sweep, sweep
from tests.verbs.helpers import CannedRunner, LocalRunner, git


def make_repo(home: Path, rel: str, remote: Path | None = None, url: str = "") -> Path:
    repo = home / rel
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hi\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "init")
    if remote is not None:
        git(remote.parent, "init", "-q", "--bare", remote.name)
        git(repo, "remote", "add", "origin", str(remote))
        git(repo, "push", "-q", "origin", "main")
        git(repo, "remote", "set-head", "origin", "main")
        git(repo, "remote", "set-url", "origin", url)
    return repo


def commit(repo: Path, name: str) -> None:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "commit", "-qm", f"add {name}")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


async def test_sweep_reports_branch_push_state_and_github_repo(home: Path, tmp_path: Path) -> None:
    token_url = "https://x-access-token:ghs_SECRET123@github.com/acme/widget.git"
    app = make_repo(home, "src/app", tmp_path / "app.git", token_url)
    git(app, "checkout", "-qb", "feature")
    commit(app, "f1")
    git(app, "push", "-q", str(tmp_path / "app.git"), "feature:feature")
    git(app, "update-ref", "refs/remotes/origin/feature", "HEAD")
    lib = make_repo(home, "work/lib", tmp_path / "lib.git", "git@github.com:acme/lib.git")
    git(lib, "checkout", "-qb", "wip")
    commit(lib, "a")
    commit(lib, "b")
    local = make_repo(home, "scratch")
    (local / "README").write_text("changed\n")

    found = await sweep(LocalRunner(home), [])
    by_path = {found.display_path(c): c for c in found.checkouts}
    assert set(by_path) == {"~/src/app", "~/work/lib", "~/scratch"}
    app_c = by_path["~/src/app"]
    assert (app_c.branch, app_c.repo, app_c.tracking, app_c.ahead, app_c.behind) == (
        "feature", Repo("acme", "widget"), True, 0, 0,
    )  # fmt: skip
    assert app_c.default_branch == "main"
    assert app_c.push_state() == "pushed"
    assert app_c.why_not_landable() is None
    lib_c = by_path["~/work/lib"]
    assert (lib_c.tracking, lib_c.ahead, lib_c.push_state()) == (False, 2, "unpushed (+2)")
    assert "not pushed" in (lib_c.why_not_landable() or "")
    scratch = by_path["~/scratch"]
    assert scratch.push_state() == "local-only, dirty"
    assert "SECRET" not in repr(found)


async def test_manifest_paths_reach_past_the_find_depth_and_dedupe(home: Path) -> None:
    deep = make_repo(home, "a/b/c/d/deep")
    make_repo(home, "node_modules/pkg")  # pruned
    make_repo(home, "a/shallow")
    found = await sweep(LocalRunner(home), ["~/a/b/c/d/deep", "~/a/shallow", str(deep), "~/gone"])
    paths = sorted(found.display_path(c) for c in found.checkouts)
    assert paths == ["~/a/b/c/d/deep", "~/a/shallow"]


async def test_the_sweep_reads_no_more_than_its_bound(home: Path) -> None:
    for i in range(MAX_CHECKOUTS + 2):
        repo = home / f"r{i:02d}"
        repo.mkdir()
        git(repo, "init", "-q")
    found = await sweep(LocalRunner(home), [])
    assert len(found.checkouts) == MAX_CHECKOUTS and found.truncated


async def test_detached_head(home: Path) -> None:
    repo = make_repo(home, "d")
    git(repo, "checkout", "-q", "--detach")
    (c,) = (await sweep(LocalRunner(home), [])).checkouts
    assert c.branch is None and c.refused_branch is None
    assert c.push_state() == "detached"


def record(*fields: bytes) -> bytes:
    return b"".join(f + b"\0" for f in fields)


HOME = record(b"home", b"/home/claude")


def checkout(branch: bytes, url: bytes = b"https://github.com/acme/widget") -> bytes:
    sha = b"a" * 40
    return record(
        b"checkout", b"/home/claude/p", branch, sha, b"", b"origin", url,
        b"1", b"0", b"0", b"main", b"0", b"0", b"0", b"0",
    )  # fmt: skip


@pytest.mark.parametrize(
    "branch",
    [b"--repo=evil/x", b"-x", b"a\nb", b"\x1b[31mred", b"x;rm -rf ~", b"a\xffb", b"a\xe2\x80\xaeb"],
)
def test_hostile_branch_names_are_refused_not_passed_on(branch: bytes) -> None:
    (c,) = parse_sweep(HOME + checkout(branch)).checkouts
    assert c.branch is None and c.refused_branch
    assert "refused" in (c.why_not_landable() or "")


@pytest.mark.parametrize(
    "reply",
    [
        b"",
        record(b"nothome", b"/x"),
        HOME + b"checkout\0only-some\0",
        HOME + checkout(b"ok")[:-1],  # no final terminator
        HOME + checkout(b"ok").replace(b"\x001\x000\x000\x00", b"\x001\x00-5\x000\x00"),
        HOME + checkout(b"ok").replace(b"\x001\x000\x000\x00", b"\x00yes\x000\x000\x00"),
        HOME + record(b"bogus"),
        HOME + checkout(b"ok") * (MAX_CHECKOUTS + 1),
    ],
)
def test_malformed_replies_are_refused_whole(reply: bytes) -> None:
    with pytest.raises(GuestCommandError, match="refused"):
        parse_sweep(reply)


async def test_a_failing_sweep_reports_sanitised_stderr() -> None:
    runner = CannedRunner(b"", status=3, stderr=b"boom \x1b]0;title\x07\n")
    with pytest.raises(GuestCommandError) as info:
        await sweep(runner, [])
    assert "\x1b" not in str(info.value) and "boom" in str(info.value)


def test_non_github_remotes_have_no_repo() -> None:
    (c,) = parse_sweep(HOME + checkout(b"f", url=b"https://gitlab.com/acme/widget.git")).checkouts
    assert c.repo is None
    assert "not a GitHub" in (c.why_not_landable() or "")


async def test_work_that_exists_nowhere_else_is_counted(home: Path, tmp_path: Path) -> None:
    """The guard before a delete reads these: commits no remote has on *any* branch,
    changed and untracked files, stashes; a pushed, clean checkout holds nothing."""
    clean = make_repo(home, "src/clean", tmp_path / "clean.git", "https://github.com/a/clean")
    busy = make_repo(home, "src/busy", tmp_path / "busy.git", "https://github.com/a/busy")
    git(busy, "checkout", "-qb", "side")
    commit(busy, "s1")
    commit(busy, "s2")
    git(busy, "checkout", "-q", "main")  # the unpushed commits are on another branch
    (busy / "new.txt").write_text("untracked\n")
    (busy / "README").write_text("edited\n")
    stashed = make_repo(home, "src/stashed", tmp_path / "st.git", "https://github.com/a/st")
    (stashed / "README").write_text("wip\n")
    git(stashed, "stash", "-q")
    found = await sweep(LocalRunner(home), [])
    by = {found.display_path(c): c for c in found.checkouts}
    assert (by["~/src/busy"].unpushed, by["~/src/busy"].changed_files) == (2, 2)
    assert by["~/src/busy"].holds_work and by["~/src/busy"].stashes == 0
    assert (by["~/src/stashed"].stashes, by["~/src/stashed"].changed_files) == (1, 0)
    assert by["~/src/stashed"].holds_work
    assert not by["~/src/clean"].holds_work
    assert clean.exists()
    assert "2 commit(s) on no remote, 2 dirty file(s)" in by["~/src/busy"].work_summary()
