"""sand publish against a real guest: commits made in the guest, read over SSH,
replayed onto a stand-in of drupal.org's forge running on the host."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.runner import SshRunner
from sand.verbs.changeset import ChangeSetError
from sand.verbs.drupal import DrupalSites, parse_issue_url
from sand.verbs.forge import GitLab
from sand.verbs.publish import PublishPlan, confirm_and_execute, prepare
from sand.verbs.target import connect
from tests.verbs.forge_standin import ForgeStandin
from tests.verbs.rig_helpers import GIT_SETUP, rig_endpoint, sh

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest
    from tests.rig.guest import NetnsGuest


pytestmark = pytest.mark.e2e

TOKEN = "glpat-E2ETOKEN-abcdefghijklmnop"

BASE = (
    GIT_SETUP
    + r"""
git init -q -b 1.0.x ~/widget && cd ~/widget
printf '<?php\n// gears\n' > gears.php && git add . && git commit -qm base
git rev-parse HEAD
"""
)


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def forge() -> Iterator[ForgeStandin]:
    standin = ForgeStandin().start()
    try:
        yield standin
    finally:
        standin.stop()


async def plan_from_guest(guest: NetnsGuest, forge: ForgeStandin) -> PublishPlan:
    issue = parse_issue_url(forge.issue_url(), DrupalSites(forge.url, forge.api))
    async with connect(rig_endpoint(guest)) as conn:
        return await prepare(SshRunner(conn, "publish"), "~/widget", issue, GitLab(forge.api))


async def test_guest_commits_are_replayed_one_call_each_then_a_merge_request(
    netns_guest: MakeGuest, forge: ForgeStandin, capfd: pytest.CaptureFixture[str]
) -> None:
    guest = netns_guest()
    forge.state.target_tip = (await sh(guest, BASE)).strip()
    await sh(
        guest,
        "set -e; cd ~/widget; printf '<?php\\n// fixed\\n' > gears.php; "
        "git commit -qam 'Fix the gears' -m 'They slipped.'; "
        "mkdir -p bin; printf '#!/bin/sh\\n' > bin/run; chmod +x bin/run; git add bin; "
        "git rm -q gears.php; git commit -qm 'Add a runner, drop the gears'",
    )
    plan = await plan_from_guest(guest, forge)
    out = io.StringIO()
    result = confirm_and_execute(plan, GitLab(forge.api, TOKEN), out=out, confirm=lambda q: True)
    assert result is not None

    calls = forge.calls("POST", "/repository/commits")
    assert len(calls) == 2
    first, second = (c.body for c in calls)
    assert first["start_sha"] == forge.state.target_tip
    assert first["commit_message"] == "Fix the gears\n\nThey slipped.\n"
    assert first["actions"] == [
        {
            "action": "update", "file_path": "gears.php", "encoding": "base64",
            "content": base64.b64encode(b"<?php\n// fixed\n").decode(),
        }
    ]  # fmt: skip
    assert [(a["action"], a["file_path"]) for a in second["actions"]] == [
        ("create", "bin/run"), ("chmod", "bin/run"), ("delete", "gears.php"),
    ]  # fmt: skip
    assert second["actions"][1]["execute_filemode"] is True
    (mr,) = forge.calls("POST", "/merge_requests")
    assert mr.body["title"] == "Issue #123: Fix the widget & its gears"
    assert mr.body["target_project_id"] == forge.state.canonical_id
    for r in forge.requests:
        assert TOKEN not in r.raw_path and TOKEN not in str(r.query) and TOKEN not in str(r.body)
        assert r.headers.get("private-token") == (TOKEN if r.method == "POST" else None)
    seen = capfd.readouterr()
    assert TOKEN not in out.getvalue() + seen.out + seen.err
    # The guest never saw the token, the project or the fork.
    env = await sh(guest, "env; cat ~/.bash_history 2>/dev/null; git -C ~/widget config -l")
    assert TOKEN not in env and "issue/widget" not in env


async def test_a_merge_in_the_guest_is_refused_by_name(
    netns_guest: MakeGuest, forge: ForgeStandin
) -> None:
    guest = netns_guest()
    forge.state.target_tip = (await sh(guest, BASE)).strip()
    merge = await sh(
        guest,
        "set -e; cd ~/widget; git checkout -qb side; echo s > s; git add s; git commit -qm side; "
        "git checkout -q 1.0.x; echo m > m; git add m; git commit -qm main; "
        "git merge -q --no-ff -m 'Merge side in' side; git rev-parse HEAD",
    )
    with pytest.raises(ChangeSetError, match=f"{merge.strip()[:12]} Merge side in"):
        await plan_from_guest(guest, forge)
    assert forge.calls("POST") == []


@pytest.mark.parametrize("name", [".git", "..", ".GIT"])
async def test_a_crafted_tree_reaching_outside_the_repository_is_refused(
    netns_guest: MakeGuest, forge: ForgeStandin, name: str
) -> None:
    guest = netns_guest()
    forge.state.target_tip = (await sh(guest, BASE)).strip()
    # git's porcelain would refuse these paths; a hostile agent uses plumbing.
    await sh(
        guest,
        "set -e; cd ~/widget; b=$(echo '[core] fsmonitor = evil' | git hash-object -w --stdin); "
        "sub=$(printf '100644 blob %s\\tconfig\\n' $b | git mktree); "
        f"t=$(printf '040000 tree %s\\t{name}\\n100644 blob %s\\tgears.php\\n' $sub $b "
        "| git mktree); "
        "c=$(git commit-tree $t -p HEAD -m sneaky); git update-ref refs/heads/1.0.x $c",
    )
    with pytest.raises(ChangeSetError, match=r"refusing file path '(\.git|\.\.|\.GIT)/config'"):
        await plan_from_guest(guest, forge)
    assert forge.calls("POST") == []
