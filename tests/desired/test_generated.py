"""A generator's work items in the desired state: one VM of its template per item, named
from the item (stable, valid, collision-free), given the item's repository and branch,
held at ``max`` (issue 43, items 1, 2 and 4)."""

from __future__ import annotations

import re

from sand.desired import build_desired
from sand.desired.generated import WorkItem, item_vm_name
from sand.manifest import parse_manifest
from sand.manifest.backends.lima import LimaConfig
from sand.manifest.backends.proxmox import ProxmoxConfig
from tests.manifest.test_generators import GENERATED


def desired_with(items: dict[str, list[WorkItem]], text: str = GENERATED):
    return build_desired(parse_manifest(text), bundle_digest="b", items=items)


def generated_vms(state):
    return {vm.name: vm for vm in state.vms if vm.generated is not None}


def test_each_item_is_a_vm_of_the_template_on_its_branch() -> None:
    state = desired_with(
        {
            "triage": [WorkItem("acme/app#123", number=123, title="Fix the login")],
            "work": [WorkItem("feature/login", branch="feature/login")],
        }
    )
    vms = generated_vms(state)
    assert sorted(vms) == ["issue-123", "work-feature-login--df7c7aeb35"]
    issue = vms["issue-123"]
    assert issue.memory == 4 * 2**30 and issue.backend == "pve"  # the template's, defaults'
    assert issue.generated is not None and issue.generated.generator == "triage"
    assert issue.generated.item == "acme/app#123" and issue.generated.title == "Fix the login"
    (repo,) = issue.repos
    assert repo.url == "https://github.com/acme/app.git" and repo.branch is None
    (branch_repo,) = vms["work-feature-login--df7c7aeb35"].repos
    assert branch_repo.branch == "feature/login" and branch_repo.path == "~/src/app"
    # The declared VMs are untouched; generated ones come after them.
    assert [vm.name for vm in state.vms][:3] == ["a", "b", "c"]


def test_names_are_stable_whatever_else_exists() -> None:
    one = generated_vms(desired_with({"work": [WorkItem("feature/x", branch="feature/x")]}))
    more = [WorkItem(b, branch=b) for b in ("feature-x", "a", "feature/x", "z")]
    many = generated_vms(desired_with({"work": more}, GENERATED.replace("max: 3", "max: 9")))
    (name,) = one
    assert name in many
    assert many[name].fingerprint == one[name].fingerprint
    assert "work-feature-x" in many  # a branch that is already a name keeps it


def test_branches_that_sanitise_alike_get_distinct_valid_names() -> None:
    branches = ["Feature/X", "feature/x", "feature_x", "feature-x", "feature--x", "x" * 300]
    names = [item_vm_name("work", WorkItem(b, branch=b)) for b in branches]
    assert len(set(names)) == len(names), names
    for name in names:
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]+(-{1,2}[a-z0-9]+)*", name), name
        assert ProxmoxConfig.name_problem(name) is None
        assert LimaConfig.name_problem(name) is None


def test_a_label_flood_is_held_at_max_and_said_once() -> None:
    flood = [WorkItem(f"acme/app#{n}", number=n) for n in range(500, 0, -1)]
    state = desired_with({"triage": flood})
    vms = generated_vms(state)
    assert sorted(vms, key=lambda n: int(n.split("-")[1])) == [f"issue-{n}" for n in range(1, 11)]
    (note,) = state.notes
    assert note == (
        "generator triage: 500 work items, held at max 10 (the first 10 in order; the rest wait)"
    )


def test_fifty_items_in_one_plan() -> None:
    text = GENERATED.replace("max: 10", "max: 50")
    state = desired_with(
        {"triage": [WorkItem(f"acme/app#{n}", number=n) for n in range(1, 51)]}, text
    )
    assert len(generated_vms(state)) == 50 and not state.notes


def test_a_branch_git_would_refuse_to_check_out_makes_no_vm() -> None:
    hostile = ["-x", "a b", "x\x1b[2J", "new\nline"]
    state = desired_with({"work": [WorkItem(b, branch=b) for b in hostile]})
    assert not generated_vms(state)
    assert len(state.notes) == 4
    for note in state.notes:
        assert note.isprintable() and "\x1b" not in note


def test_the_template_carries_preserve_and_protect_like_any_vm() -> None:
    text = GENERATED.replace("vm: {memory: 4GiB}", "vm: {memory: 4GiB, preserve: [~/src]}")
    vms = generated_vms(desired_with({"triage": [WorkItem("acme/app#1", number=1)]}, text))
    assert vms["issue-1"].preserve == ("~/src",)
    assert vms["issue-1"].protect is False
