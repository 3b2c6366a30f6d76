"""Untrusted input stays data (issue 43, item 4): a branch named like a command, read
from a real repository by the branch generator, becomes a VM whose guest checks out
exactly that branch (the guest's repos step, run for real) and nothing runs; a title
or key full of terminal escapes and line breaks reaches the plan as one inert line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sand.desired import build_desired
from sand.desired.generated import WorkItem
from sand.manifest import parse_manifest
from sand.observed import Observation
from sand.plan import make_plan
from sand.plan.generated import with_items_gone
from sand.plan.plan_json import plan_to_json
from sand.plan.render import render_text
from sand.provision.steps import repos_step
from sand.workitems.branches import branch_items
from tests.manifest.test_generators import GENERATED
from tests.plan.helpers import POLICIES
from tests.provision.test_repos_script import Guest, guest  # noqa: F401 (a fixture)

HOSTILE_BRANCH = "feature/$(touch${IFS}pwned)`touch${IFS}pwned2`;x"


def test_a_branch_named_like_a_command_is_only_ever_a_value(guest: Guest, tmp_path) -> None:  # noqa: F811
    subprocess.run(
        ["git", "--git-dir", str(guest.origin), "branch", "--", HOSTILE_BRANCH, "main"],
        check=True,
        capture_output=True,
    )
    text = GENERATED.replace("https://github.com/acme/app.git", guest.url)
    items = branch_items(guest.url, "feature/*", generator="work")
    assert [i.branch for i in items] == [HOSTILE_BRANCH]
    state = build_desired(parse_manifest(text), items={"work": items})
    (vm,) = [v for v in state.vms if v.generated is not None]
    assert vm.name.startswith("work-feature-touch-ifs-pwned-touch-ifs-pwned2-x--")
    proc = guest.run_stdin(repos_step(vm).stdin)
    assert proc.returncode == 0, proc.stderr
    checkout = guest.home / "src" / "app"
    head = subprocess.run(
        ["git", "-C", str(checkout), "symbolic-ref", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert head.stdout.strip() == HOSTILE_BRANCH
    for root in (guest.root, guest.home, checkout, Path.cwd()):
        assert not (root / "pwned").exists() and not (root / "pwned2").exists()


def test_a_hostile_title_and_key_reach_the_plan_as_one_inert_line() -> None:
    items = {
        "triage": [
            WorkItem(
                "acme/app#7\x1b[2J",
                number=7,
                title="\x1b]0;owned\x07Fix\nthe\rlogin \x1b[31m$(rm -rf ~)\u202e ../../x",
                body="\x1b[2J" * 10,
            )
        ],
        "work": [WorkItem("../../x\n\x1b[2J", branch="../../x\n\x1b[2J")],
    }
    state = build_desired(parse_manifest(GENERATED), bundle_digest="b", items=items)
    empty = {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}
    plan = with_items_gone(make_plan(state, empty, POLICIES), state.manifest, state.notes)
    out = render_text(plan)
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    (line,) = [x for x in out.splitlines() if '+ vm "issue-7"' in x]
    # The escapes are gone whole (the window title's too), the breaks are spaces.
    assert line == (
        '  + vm "issue-7" (from generator triage: acme/app#7 "Fix the login $(rm -rf ~) ../../x") {'
    )
    # The same in --json: the title as the text shows it.
    (made,) = [c for c in plan_to_json(plan)["changes"] if c["vm"] == "issue-7"]
    assert made["generated"]["title"] == "Fix the login $(rm -rf ~) ../../x"
    # The branch git would refuse makes no VM and is said once, inert.
    (note,) = [x for x in out.splitlines() if "no VM for" in x]
    assert "../../x" in note and "\n" not in note
    assert not any(vm.name.startswith("work-") for vm in state.vms)
