"""The host's reading of a drupal.org issue: URL, page title, token file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sand.redaction import redact
from sand.verbs.drupal import (
    DrupalSites,
    PublishRefused,
    branch_slug,
    parse_issue_url,
    read_token,
    title_from_page,
    token_path,
)

SITES = DrupalSites()


@pytest.mark.parametrize(
    "url",
    [
        "https://www.drupal.org/project/pathauto/issues/3412345",
        "https://drupal.org/project/pathauto/issues/3412345/",
        " https://www.drupal.org/project/pathauto/issues/3412345#comment-1",
    ],
)
def test_issue_urls_name_the_project_and_fork(url: str) -> None:
    issue = parse_issue_url(url, SITES)
    assert (issue.project, issue.nid) == ("pathauto", 3412345)
    assert issue.canonical_path == "project/pathauto"
    assert issue.fork_path == "issue/pathauto-3412345"
    assert issue.url == "https://www.drupal.org/project/pathauto/issues/3412345"


@pytest.mark.parametrize(
    "url",
    [
        "http://www.drupal.org/project/pathauto/issues/1",
        "https://www.drupal.org.evil.test/project/pathauto/issues/1",
        "https://git.drupalcode.org/project/pathauto/issues/1",
        "https://www.drupal.org/node/3412345",
        "https://www.drupal.org/i/3412345",
        "https://www.drupal.org/project/path-auto/issues/1",
        "https://www.drupal.org/project/Pathauto/issues/1",
        "https://www.drupal.org/project/pathauto/issues/0",
        "https://www.drupal.org/project/pathauto/issues/1?x=y",
        "https://www.drupal.org/project/../issues/1",
        "https://user@www.drupal.org/project/pathauto/issues/1",
    ],
)
def test_anything_else_is_refused(url: str) -> None:
    with pytest.raises(PublishRefused, match=r"not a drupal\.org issue URL"):
        parse_issue_url(url, SITES)


def test_the_title_comes_from_the_page_title() -> None:
    page = (
        "<html><head><meta charset=utf-8><title>Make &quot;aliases&quot;\n  work [#42] | "
        "Drupal.org</title></head><body><h1>Other</h1></body></html>"
    )
    assert title_from_page(page, 42) == 'Make "aliases" work'
    assert title_from_page("<title>\x1b]0;x\x07Evil\u202e [#42] | Drupal.org</title>", 42) == (
        "Evil"
    )
    with pytest.raises(PublishRefused):
        title_from_page("<html></html>", 42)


def test_branch_slug() -> None:
    assert branch_slug(42, 'Make "aliases" work!') == "42-make-aliases-work"
    assert branch_slug(42, "!!!") == "42-sand"
    assert len(branch_slug(42, "word " * 40)) <= 43


def write_token(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
    os.write(fd, text.encode())
    os.close(fd)
    path.chmod(mode)


def test_token_is_read_from_a_private_file_and_redacted(tmp_path: Path) -> None:
    path = tmp_path / "drupalorg.token"
    write_token(path, "glpat-abcdefghijklmnop1234\n", 0o600)
    assert read_token(path) == "glpat-abcdefghijklmnop1234"
    assert redact("x glpat-abcdefghijklmnop1234 y") == "x [redacted] y"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o666])
def test_token_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "drupalorg.token"
    write_token(path, "glpat-abcdefghijklmnop1234", mode)
    with pytest.raises(PublishRefused, match=f"mode {mode:04o}") as info:
        read_token(path)
    assert "glpat" not in str(info.value)


def test_missing_or_odd_tokens(tmp_path: Path) -> None:
    with pytest.raises(PublishRefused, match=r"no drupal\.org token"):
        read_token(tmp_path / "none")
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(PublishRefused, match="not a regular file"):
        read_token(tmp_path / "dir")
    write_token(tmp_path / "short", "abc", 0o600)
    with pytest.raises(PublishRefused, match="does not hold a token"):
        read_token(tmp_path / "short")


def test_token_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert token_path() == tmp_path / "sand" / "drupalorg.token"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert token_path() == Path.home() / ".config" / "sand" / "drupalorg.token"
