"""Branch names from a guest: git's check-ref-format rules plus printability."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sand.refname import branch_problem, valid_branch


@pytest.mark.parametrize(
    "name",
    ["main", "feature/x", "x;rm$IFS-rf$HOME", "a$(id)b", "`id`", "a|b&c>d", "v1.2", "a/b", "@x"],
)
def test_ordinary_and_shell_looking_names_git_allows_are_valid(name: str) -> None:
    assert valid_branch(name), branch_problem(name)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("--force", "'-'"),
        ("-x", "'-'"),
        ("x;rm -rf ~", "space"),
        ("a\nb", "control"),
        ("\x1b[31mred", "control"),
        ("a\u202eb", "invisible"),
        ("a..b", ".."),
        ("a/.hidden", "'.'"),
        ("a.lock", ".lock"),
        ("a/", "empty path"),
        ("a//b", "empty path"),
        ("/a", "empty path"),
        ("a.", "ends with"),
        ("@", "'@'"),
        ("a@{1}", "'@{'"),
        ("HEAD", "HEAD"),
        ("a~1", "~"),
        ("a^", "~"),
        ("a:b", "~"),
        ("a?", "~"),
        ("a*", "~"),
        ("a[b", "~"),
        ("a\\b", "~"),
        ("x" * 256, "longer"),
    ],
)
def test_refused_names_say_why(name: str, why: str) -> None:
    problem = branch_problem(name)
    assert problem is not None and why in problem


def _git_accepts(name: str) -> bool:
    res = subprocess.run(
        ["git", "check-ref-format", "--branch", name], capture_output=True, check=False
    )
    return res.returncode == 0


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), max_size=20))
def test_every_name_sand_accepts_git_accepts_too(name: str) -> None:
    if valid_branch(name):
        assert _git_accepts(name), name


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab./-@{}~^:?*[\\ .lockHEAD", max_size=12))
def test_on_ascii_sand_and_git_agree(name: str) -> None:
    # Outside the printability rule sand adds, the two rule sets are the same,
    # except that sand also refuses what `git branch` would: "HEAD", and "@"
    # (which check-ref-format --branch reads as "the current branch").
    if name in ("@", "HEAD"):
        assert not valid_branch(name)
    else:
        assert valid_branch(name) == _git_accepts(name), name
