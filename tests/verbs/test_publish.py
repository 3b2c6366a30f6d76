"""sand publish on the host side, against a local stand-in for drupal.org's forge."""

from __future__ import annotations

import base64
import io
import logging
from pathlib import Path

import pytest

from sand.verbs.changeset import ChangeSet, Commit, FileAction
from sand.verbs.drupal import DrupalSites, PublishRefused, parse_issue_url
from sand.verbs.forge import DrupalOrgRefused, ForgeError, GitLab
from sand.verbs.publish import (
    ForkMoved,
    Published,
    PublishPlan,
    confirm_and_execute,
    match_fork,
    prepare,
    render_publish,
)
from tests.audit.helpers import audit_records
from tests.verbs.forge_standin import ForgeStandin
from tests.verbs.helpers import LocalRunner, git

TOKEN = "glpat-TESTTOKEN-0123456789abcdef"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def checkout(home: Path, forge: ForgeStandin) -> Path:
    repo = home / "widget"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "1.0.x")
    (repo / "gears.php").write_text("<?php // gears\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    forge.state.target_tip = git(repo, "rev-parse", "HEAD")
    return repo


def work(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


async def plan_for(forge: ForgeStandin, home: Path, **kw: str) -> PublishPlan:
    issue = parse_issue_url(forge.issue_url(), DrupalSites(forge.url, forge.api))
    return await prepare(LocalRunner(home), "~/widget", issue, GitLab(forge.api), **kw)


def run(
    plan: PublishPlan, forge: ForgeStandin, answer: bool = True
) -> tuple[object, str, list[str]]:
    out = io.StringIO()
    asked: list[str] = []

    def confirm(q: str) -> bool:
        asked.append(q)
        return answer

    result = confirm_and_execute(plan, GitLab(forge.api, TOKEN), out=out, confirm=confirm)
    return result, out.getvalue(), asked


async def test_one_commit_call_per_commit_then_a_merge_request(
    forge: ForgeStandin, home: Path, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    repo = checkout(home, forge)
    base = forge.state.target_tip
    work(repo, "gears.php", "<?php // fixed gears\n", "Fix the gears\n\nThey slipped.")
    work(repo, "README.md", "# widget\n\x1b[2Jhidden\n", "Document it")

    plan = await plan_for(forge, home)
    result, out, asked = run(plan, forge)

    assert result is not None
    commits = forge.calls("POST", "/repository/commits")
    assert len(commits) == 2
    first, second = (c.body for c in commits)
    assert first["branch"] == "123-fix-the-widget-its-gears"
    assert first["start_sha"] == base and first["start_project"] == forge.state.canonical_id
    assert "start_sha" not in second
    assert first["commit_message"] == "Fix the gears\n\nThey slipped.\n"
    assert (first["author_name"], first["author_email"]) == ("Agent", "agent@example.test")
    assert first["actions"] == [
        {
            "action": "update", "file_path": "gears.php", "encoding": "base64",
            "content": base64.b64encode(b"<?php // fixed gears\n").decode(),
        }
    ]  # fmt: skip
    assert second["actions"][0]["action"] == "create"
    (mr,) = forge.calls("POST", "/merge_requests")
    assert mr.body == {
        "source_branch": "123-fix-the-widget-its-gears",
        "target_branch": "1.0.x",
        "target_project_id": forge.state.canonical_id,
        "title": "Issue #123: Fix the widget & its gears",
    }
    # The person saw where, what, and every byte (escapes made visible, not played).
    assert "issue/widget-123" in out and "project/widget 1.0.x" in out
    assert "    | <?php // fixed gears" in out and "\\x1b[2Jhidden" in out and "\x1b" not in out
    assert asked and "Publish 2 commits to issue/widget-123" in asked[0]
    assert "opened merge request: " in out
    # The token went only into the header of the writes: no URL, no read, no output, no log.
    for r in forge.requests:
        assert TOKEN not in r.raw_path and TOKEN not in str(r.query) and TOKEN not in str(r.body)
        assert r.headers.get("private-token") == (TOKEN if r.method == "POST" else None)
    seen = capfd.readouterr()
    assert TOKEN not in out + seen.out + seen.err + caplog.text


async def test_a_second_publish_sends_only_the_new_commits(
    forge: ForgeStandin, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    repo = checkout(home, forge)
    first = work(repo, "a.txt", "a\n", "First")
    run(await plan_for(forge, home), forge)
    (published,) = [r for r in audit_records(tmp_path / "state") if r["kind"] == "publish"]
    assert published["destination"] == "issue/widget-123" and published["ok"]
    assert published["commits"] == [{"guest_sha": first, "subject": "First", "files": ["a.txt"]}]
    assert published["merge_request"] and len(published["made"]) == 1
    work(repo, "b.txt", "b\n", "Second")
    plan = await plan_for(forge, home)
    assert plan.already_published == 1 and [c.subject for c in plan.pending] == ["Second"]
    assert plan.open_mr is not None
    _, out, _ = run(plan, forge)
    commits = forge.calls("POST", "/repository/commits")
    assert [c.body["commit_message"] for c in commits] == ["First\n", "Second\n"]
    assert "start_sha" not in commits[1].body
    assert len(forge.calls("POST", "/merge_requests")) == 1
    assert "merge request already open" in out
    # A third time there is nothing to do, and nothing is asked.
    plan = await plan_for(forge, home)
    result, out, asked = run(plan, forge)
    assert isinstance(result, Published) and result.commits == () and not asked
    assert "Nothing to publish" in out


async def test_a_fork_branch_that_went_elsewhere_is_refused(
    forge: ForgeStandin, home: Path
) -> None:
    repo = checkout(home, forge)
    work(repo, "a.txt", "a\n", "Mine")
    forge.state.fork_branches["123-fix-the-widget-its-gears"] = [
        {"id": "f" * 40, "message": "Someone else's", "author_name": "X", "author_email": "x@x"}
    ]
    with pytest.raises(PublishRefused, match="diverged"):
        await plan_for(forge, home)
    forge.state.fork_branches.clear()
    forge.state.fork_tips["123-fix-the-widget-its-gears"] = "e" * 40
    with pytest.raises(PublishRefused, match="not where the guest's commits start"):
        await plan_for(forge, home)
    assert forge.calls("POST") == []


async def test_declining_publishes_nothing(forge: ForgeStandin, home: Path) -> None:
    repo = checkout(home, forge)
    work(repo, "a.txt", "a\n", "Mine")
    result, out, _ = run(await plan_for(forge, home), forge, answer=False)
    assert result is None and "nothing was published" in out
    assert forge.calls("POST") == []


async def test_a_fork_that_moved_after_reading_is_not_written(
    forge: ForgeStandin, home: Path
) -> None:
    repo = checkout(home, forge)
    work(repo, "a.txt", "a\n", "Mine")
    plan = await plan_for(forge, home)
    forge.state.fork_tips[plan.destination.branch] = "9" * 40
    with pytest.raises(ForkMoved):
        run(plan, forge)
    assert forge.calls("POST") == []


async def test_guest_behind_the_project_is_told_to_fetch(forge: ForgeStandin, home: Path) -> None:
    checkout(home, forge)
    forge.state.target_tip = "7" * 40
    with pytest.raises(PublishRefused, match="run git fetch in the guest"):
        await plan_for(forge, home)


async def test_host_side_choices(forge: ForgeStandin, home: Path) -> None:
    repo = checkout(home, forge)
    work(repo, "a.txt", "a\n", "Mine")
    plan = await plan_for(forge, home, branch="123-my-take")
    assert plan.destination.branch == "123-my-take"
    with pytest.raises(PublishRefused, match="fork branch '--force'"):
        await plan_for(forge, home, branch="--force")
    with pytest.raises(PublishRefused, match=r"has no branch 9\.x"):
        await plan_for(forge, home, target_branch="9.x")
    forge.state.fork_exists = False
    with pytest.raises(PublishRefused, match="Create issue fork"):
        await plan_for(forge, home)


async def test_nothing_to_publish(forge: ForgeStandin, home: Path) -> None:
    checkout(home, forge)
    with pytest.raises(PublishRefused, match=r"no commits that project/widget 1\.0\.x lacks"):
        await plan_for(forge, home)


async def test_redirects_are_refused(forge: ForgeStandin, home: Path) -> None:
    checkout(home, forge)
    forge.state.redirect_issue_page = True
    with pytest.raises(ForgeError, match="redirect"):
        await plan_for(forge, home)
    assert not forge.calls("GET", "/elsewhere")


async def test_an_edge_block_is_named(forge: ForgeStandin, home: Path) -> None:
    repo = checkout(home, forge)
    work(repo, "a.txt", "a\n", "Mine")
    plan = await plan_for(forge, home)
    forge.state.edge_blocks_commits = True
    with pytest.raises(DrupalOrgRefused, match="edge refused"):
        run(plan, forge)


def test_binary_content_is_summarised_not_dumped(forge: ForgeStandin) -> None:
    changes = ChangeSet(
        (
            Commit(
                "a" * 40,
                "b" * 40,
                "m\n",
                "A",
                "a@x",
                (FileAction("create", "x.png", b"\x89PNG\0"),),
            ),
        )
    )
    forge.state.target_tip = "b" * 40
    issue = parse_issue_url(forge.issue_url(), DrupalSites(forge.url, forge.api))
    from sand.verbs.publish import resolve_destination

    dest = resolve_destination(issue, GitLab(forge.api))
    text = render_publish(match_fork(dest, changes, GitLab(forge.api)))
    assert "x.png (5 bytes): binary, sha256 " in text
