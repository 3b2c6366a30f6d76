"""sand land on the host side: the table, gh argv, hostile guest data, the ledger."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest

from sand.guest.remotes import parse_remote
from sand.verbs import ledger
from sand.verbs.github import Gh, GhError, compare_url
from sand.verbs.land import LandRefused, land
from tests.audit.helpers import audit_records
from tests.verbs.helpers import CannedRunner, GhStandin

SHA = b"a" * 40


def reply(*checkouts: tuple[bytes, bytes]) -> bytes:
    out = b"home\0/home/claude\0"
    for path, branch in checkouts:
        fields = [
            b"checkout", b"/home/claude/" + path, branch, SHA, b"", b"origin",
            b"git@github.com:acme/widget.git", b"1", b"0", b"0", b"main", b"0",
            b"0", b"0", b"0",
        ]  # fmt: skip
        out += b"".join(f + b"\0" for f in fields)
    return out


@pytest.fixture
def gh(tmp_path: Path) -> GhStandin:
    return GhStandin(tmp_path / "bin")


async def run_land(
    tmp_path: Path, runner: CannedRunner, gh: Gh | None, **kw: object
) -> tuple[int, str, Path]:
    out = io.StringIO()
    path = tmp_path / "state" / "landing.jsonl"
    code = await land(
        runner,
        vm="dev",
        repo_paths=["~/p"],
        ledger_file=path,
        gh=gh,
        out=out,
        **kw,  # type: ignore[arg-type]
    )
    return code, out.getvalue(), path


async def test_table_ledger_and_gh_argv_for_a_pushed_branch(tmp_path: Path, gh: GhStandin) -> None:
    gh.set(
        prs=[
            {
                "number": 42,
                "state": "OPEN",
                "isDraft": True,
                "url": "https://github.com/acme/widget/pull/42",
            }
        ]
    )
    runner = CannedRunner(reply((b"p", b"feature"), (b"q", b"main")))
    code, out, path = await run_land(tmp_path, runner, Gh(str(gh.path)))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["PATH", "BRANCH", "PUSH", "PR"]
    assert lines[1].split() == ["~/p", "feature", "pushed", "#42", "open", "(draft)"]
    assert lines[2].split() == ["~/q", "main", "pushed", "-"]  # the default branch: no PR
    assert runner.stdins == [b"~/p\0"]
    assert gh.calls == [
        ["auth", "status", "--hostname=github.com"],
        ["pr", "list", "--repo=acme/widget", "--head=feature", "--state=all",
         "--json=number,state,isDraft,url", "--limit=20"],
    ]  # fmt: skip
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    recs = ledger.read(path)
    assert [(r["action"], r["path"], r["branch"]) for r in recs] == [
        ("sweep", "~/p", "feature"),
        ("sweep", "~/q", "main"),
    ]
    assert recs[0]["pr"] == {
        "number": 42, "state": "open", "draft": True, "url": "https://github.com/acme/widget/pull/42"
    }  # fmt: skip
    assert recs[0]["compare_url"] == "https://github.com/acme/widget/pull/new/feature"
    assert recs[0]["repo"] == "acme/widget" and recs[0]["vm"] == "dev"
    assert set(recs[0]) == {
        "v", "ts", "action", "vm", "path", "branch", "repo", "push", "compare_url", "pr"
    }  # fmt: skip


async def test_shell_metacharacters_reach_gh_as_one_inert_argv_item(
    tmp_path: Path, gh: GhStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    branch = "x;rm$IFS-rf$HOME;touch${IFS}pwned"
    gh.set(message="Title `id`\n\nBody $(id)\x1b[2J")
    runner = CannedRunner(reply((b"p", branch.encode())))
    code, out, path = await run_land(tmp_path, runner, Gh(str(gh.path)), open_pr=True)
    assert code == 0
    create = gh.calls[-1]
    assert create[:2] == ["pr", "create"]
    assert f"--head={branch}" in create
    assert "--title=Title `id`" in create
    body = next(a for a in create if a.startswith("--body="))
    assert "\x1b" not in body and "\\x1b[2J" in body
    assert not list(tmp_path.rglob("pwned"))
    assert "opened draft #7 open (draft)" in out
    assert [r["action"] for r in ledger.read(path)] == ["sweep", "pr-create"]
    assert ledger.read(path)[-1]["pr"]["number"] == 7
    # and the host's audit trail holds the same metadata, the branch as one inert value
    trail = [r for r in audit_records(tmp_path / "state") if r["kind"].startswith("land.")]
    assert [(r["kind"], r["vm"], r["branch"]) for r in trail] == [
        ("land.sweep", "dev", branch), ("land.pr-create", "dev", branch)
    ]  # fmt: skip
    assert trail[-1]["pr"]["number"] == 7 and trail[-1]["repo"] == "acme/widget"


@pytest.mark.parametrize(
    "branch", [b"--repo=evil/x", b"-x", b"a\nfake row", b"\x1b[31mred\x1b[0m", b"x\x07"]
)
async def test_hostile_branch_names_never_reach_gh_or_the_terminal(
    tmp_path: Path, gh: GhStandin, branch: bytes
) -> None:
    runner = CannedRunner(reply((b"p", branch)))
    code, out, path = await run_land(tmp_path, runner, Gh(str(gh.path)))
    assert code == 0
    assert all(ch.isprintable() or ch == "\n" for ch in out)
    assert len(out.splitlines()) == 2
    assert "(invalid name)" in out and "invalid branch name" in out
    assert [c for c in gh.calls if c[0] != "auth"] == []
    with pytest.raises(LandRefused, match="refused"):
        await run_land(tmp_path, runner, Gh(str(gh.path)), open_pr=True, path="~/p")
    assert ledger.read(path)[0]["branch"] is None


async def test_gh_absent(tmp_path: Path) -> None:
    runner = CannedRunner(reply((b"p", b"feature")))
    code, out, path = await run_land(tmp_path, runner, None)
    assert code == 0 and "gh not found" in out
    with pytest.raises(GhError, match=r"not installed.*pull/new/feature"):
        await run_land(tmp_path, runner, None, open_pr=True)
    assert [r["action"] for r in ledger.read(path)] == ["sweep", "sweep"]


async def test_gh_not_logged_in(tmp_path: Path, gh: GhStandin) -> None:
    gh.set(authed=False)
    runner = CannedRunner(reply((b"p", b"feature")))
    code, out, _ = await run_land(tmp_path, runner, Gh(str(gh.path)))
    assert code == 0 and "gh not logged in" in out
    with pytest.raises(GhError, match="not logged in"):
        await run_land(tmp_path, runner, Gh(str(gh.path)), open_pr=True)
    assert all(c[:2] == ["auth", "status"] for c in gh.calls)


async def test_gh_found_on_path(
    tmp_path: Path, gh: GhStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(gh.dir))
    found = Gh.find()
    assert found is not None and found.executable == str(gh.path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert Gh.find() is None


async def test_an_open_pr_is_not_opened_twice(tmp_path: Path, gh: GhStandin) -> None:
    url = "https://github.com/acme/widget/pull/3"
    gh.set(prs=[{"number": 3, "state": "OPEN", "isDraft": False, "url": url}])
    runner = CannedRunner(reply((b"p", b"feature")))
    _, out, _ = await run_land(tmp_path, runner, Gh(str(gh.path)), open_pr=True)
    assert "#3 open is already open" in out
    assert not any(c[:2] == ["pr", "create"] for c in gh.calls)


async def test_web_prints_the_compare_url_without_calling_gh(tmp_path: Path, gh: GhStandin) -> None:
    opened: list[str] = []
    runner = CannedRunner(reply((b"p", b"feat/x#1")))
    code, out, path = await run_land(
        tmp_path, runner, Gh(str(gh.path)), web=True, opener=lambda u: opened.append(u) or True
    )
    url = "https://github.com/acme/widget/pull/new/feat/x%231"
    assert code == 0 and out.splitlines()[-1] == url
    assert opened == [url]
    assert gh.calls == []
    assert ledger.read(path)[-1]["action"] == "web"


async def test_selection(tmp_path: Path) -> None:
    two = CannedRunner(reply((b"p", b"a"), (b"q", b"b")))
    with pytest.raises(LandRefused, match=r"several checkouts.*~/p, ~/q"):
        await run_land(tmp_path, two, None, web=True)
    _, out, _ = await run_land(tmp_path, two, None, web=True, path="~/q")
    assert out.endswith("/pull/new/b\n")
    _, out, _ = await run_land(tmp_path, two, None, web=True, path="/home/claude/p/")
    assert out.endswith("/pull/new/a\n")
    with pytest.raises(LandRefused, match="no checkout '~/z'"):
        await run_land(tmp_path, two, None, web=True, path="~/z")
    none = CannedRunner(reply((b"p", b"main")))
    with pytest.raises(LandRefused, match="nothing to land"):
        await run_land(tmp_path, none, None, web=True)


@pytest.mark.parametrize(
    ("url", "slug"),
    [
        ("https://github.com/acme/widget.git", "acme/widget"),
        ("https://github.com/acme/widget", "acme/widget"),
        ("https://user:tok@github.com/acme/widget.git", "acme/widget"),
        ("git@github.com:acme/my.repo.git", "acme/my.repo"),
        ("ssh://git@github.com/acme/widget.git", "acme/widget"),
        ("https://gitlab.com/acme/widget.git", None),
        ("https://github.com.evil.test/acme/widget", None),
        ("https://evil.test/github.com/acme/widget", None),
        ("https://github.com/acme/widget/extra", None),
        ("https://github.com/-acme/widget", None),
        ("https://github.com/acme/..", None),
        ("https://github.com/acme/widget\n", "acme/widget"),
        ("https://github.com/acme/wid get", None),
        ("file:///srv/github.com/acme/widget", None),
    ],
)
def test_remote_urls_are_parsed_strictly(url: str, slug: str | None) -> None:
    repo = parse_remote(url)
    assert (repo.slug if repo else None) == slug


def test_compare_url_quotes_the_branch() -> None:
    repo = parse_remote("git@github.com:acme/widget.git")
    assert repo is not None
    assert (
        compare_url(repo, "a;b$c%d#e")
        == "https://github.com/acme/widget/pull/new/a%3Bb%24c%25d%23e"
    )


def test_pr_rows_from_gh_are_checked(tmp_path: Path, gh: GhStandin) -> None:
    gh.set(prs=[
        {"number": 9, "state": "OPEN", "isDraft": False, "url": "https://github.com/other/repo/pull/9"},
        {"number": "1", "state": "OPEN", "url": "https://github.com/acme/widget/pull/1"},
        {"number": 5, "state": "MERGED", "isDraft": False, "url": "https://github.com/acme/widget/pull/5"},
    ])  # fmt: skip
    repo = parse_remote("git@github.com:acme/widget.git")
    assert repo is not None
    pr = Gh(str(gh.path)).find_pr(repo, "feature")
    assert pr is not None and (pr.number, pr.state) == (5, "merged")
    assert json.dumps(pr.to_json())
