"""Forks declared in the manifest (``from: {vm: ...}``): what they inherit, where a
bad one is refused (FILE:LINE:COL), and what the plan says of them (issue 29, item 1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.observed import Observation
from sand.plan import Action, make_plan
from sand.plan.render import render_text
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired

REPOS = MANIFEST.replace(
    "defaults:",
    "repos:\n  webapp: {url: https://example.test/webapp.git}\ndefaults:",
)
SOURCE = REPOS.replace(
    "  - name: a\n", "  - name: a\n    memory: 12GiB\n    repos: [webapp]\n    protect: true\n"
)
FORKED = SOURCE + "  - name: try-1\n    from: {vm: a}\n"
# The planner against backends that fork (which ones do is each backend's own word).
FORKING = {name: replace(policy, fork=True) for name, policy in POLICIES.items()}


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def test_a_fork_takes_what_it_leaves_out_from_its_source_but_not_protect() -> None:
    fork = {vm.name: vm for vm in desired(FORKED).vms}["try-1"]
    assert fork.fork is not None and fork.fork.source == "a" and not fork.fork.memory
    assert fork.memory == 12 * 2**30
    assert [r.name for r in fork.repos] == ["webapp"]
    assert fork.backend == "pve"
    assert fork.protect is False
    assert fork.image == "fork:a" and fork.base is None


def test_a_fork_may_set_its_own_fields_and_ask_for_the_sources_memory() -> None:
    text = SOURCE + "  - name: try-1\n    from: {vm: a, snapshot: memory}\n    cpus: 8\n"
    fork = {vm.name: vm for vm in desired(text).vms}["try-1"]
    assert fork.cpus == 8 and fork.memory == 12 * 2**30
    assert fork.fork is not None and fork.fork.memory


def test_a_fork_of_an_undeclared_vm_is_refused_where_it_is_written() -> None:
    text = SOURCE + "  - name: try-1\n    from:\n      vm: agent-9\n"
    line = text.splitlines().index("      vm: agent-9") + 1
    assert errors_of(text) == [
        f"m.yaml:{line}:11: VM 'try-1' forks 'agent-9', which is not a VM of this "
        "manifest (declared: a, b, c)"
    ]


def test_a_fork_on_another_backend_than_its_source_is_refused() -> None:
    text = SOURCE + "  - name: try-1\n    from: {vm: a}\n    backend: laptop\n"
    line = len(text.splitlines())  # the fork's own backend, the last line
    problems = errors_of(text)
    assert len(problems) == 1 and problems[0].startswith(f"m.yaml:{line}:14: ")
    assert "a fork lives on its source's backend" in problems[0]


def test_lima_cannot_fork_memory_and_says_so_at_the_snapshot() -> None:
    text = SOURCE + "  - name: try-c\n    from: {vm: c, snapshot: memory}\n"
    line = text.splitlines().index("    from: {vm: c, snapshot: memory}") + 1
    problems = errors_of(text)
    assert len(problems) == 1 and problems[0].startswith(f"m.yaml:{line}:")
    assert "Lima cannot fork a running VM's memory" in problems[0]


def test_proxmox_may_fork_memory() -> None:
    parse_manifest(SOURCE + "  - name: try-1\n    from: {vm: a, snapshot: memory}\n")


def test_a_fork_of_itself_is_refused() -> None:
    text = SOURCE + "  - name: x\n    from: {vm: y}\n  - name: y\n    from: {vm: x}\n"
    problems = errors_of(text)
    assert len(problems) == 2 and all("a fork of itself" in p for p in problems)


def test_a_fork_of_a_fork_takes_the_first_sources_fields() -> None:
    text = FORKED + "  - name: try-2\n    from: {vm: try-1}\n"
    fork = {vm.name: vm for vm in desired(text).vms}["try-2"]
    assert fork.memory == 12 * 2**30 and fork.image == "fork:try-1"


def _plan(text: str, policies=FORKING, *, with_fork: bool = False):  # type: ignore[no-untyped-def]
    state = desired(text)
    obs = converged(state)
    if not with_fork:
        pve = tuple(vm for vm in obs["pve"].vms if vm.name != "try-1")
        obs["pve"] = Observation("pve", pve)
    return make_plan(state, obs, policies)


def test_the_plan_says_a_fork_is_made_from_its_source_at_apply_time() -> None:
    plan = _plan(FORKED)
    (change,) = plan.actionable()
    assert change.vm == "try-1" and change.action is Action.CREATE
    text = render_text(plan)
    assert '  + vm "try-1" (fork of a at apply time) {' in text
    assert '= "fork:a"' in text


def test_a_backend_that_cannot_fork_blocks_the_fork_instead_of_creating_it() -> None:
    state = desired(SOURCE + "  - name: try-c\n    from: {vm: c}\n")
    obs = converged(state)
    obs["laptop"] = Observation("laptop", tuple(v for v in obs["laptop"].vms if v.name == "c"))
    unable = {**POLICIES, "laptop": replace(POLICIES["laptop"], fork=False)}
    plan = make_plan(state, obs, unable)
    (change,) = [c for c in plan.changes if c.vm == "try-c"]
    assert change.action is Action.BLOCKED and change.blocked_action is Action.CREATE
    assert change.reasons == ("backend 'laptop' cannot fork VMs yet",)


@pytest.mark.parametrize(
    ("entry", "note"),
    [
        ("{vm: c}", "(fork of c at apply time: stops c for the copy)"),
        (
            "{vm: c, force: true}",
            "(fork of c at apply time: stops c for the copy, even while its agent works)",
        ),
    ],
)
def test_the_plan_says_a_lima_fork_stops_its_source(entry: str, note: str) -> None:
    state = desired(SOURCE + f"  - name: try-c\n    from: {entry}\n")
    obs = converged(state)
    obs["laptop"] = Observation("laptop", tuple(v for v in obs["laptop"].vms if v.name == "c"))
    plan = make_plan(state, obs, POLICIES)  # Lima's own capabilities: it stops the source
    (change,) = [c for c in plan.changes if c.vm == "try-c"]
    assert change.action is Action.CREATE
    assert f'  + vm "try-c" {note} {{' in render_text(plan)


def test_a_fork_waits_for_its_source_to_exist() -> None:
    state = desired(FORKED)
    obs = converged(state)
    obs["pve"] = Observation(
        "pve", tuple(v for v in obs["pve"].vms if v.name not in ("a", "try-1"))
    )
    plan = make_plan(state, obs, FORKING)
    (change,) = [c for c in plan.changes if c.vm == "try-1"]
    assert change.action is Action.BLOCKED
    (blocker,) = change.blockers
    assert blocker.kind == "fork"
    assert blocker.reason == (
        "its source 'a' does not exist on backend 'pve' yet: apply once more after it is created"
    )


def test_a_later_change_of_the_source_never_replaces_the_fork() -> None:
    converged_fleet = converged(desired(FORKED))
    changed = FORKED.replace("    memory: 12GiB\n", '    memory: 12GiB\n    image: "9001"\n', 1)
    plan = make_plan(desired(changed), converged_fleet, FORKING)
    by_vm = {c.vm: c for c in plan.changes}
    assert [f.field for f in by_vm["a"].fields] == ["image"]  # a must be replaced (protected)
    assert by_vm["try-1"].action is Action.NOOP


def test_the_json_plan_names_what_a_fork_is_made_from() -> None:
    from sand.plan.render import plan_to_json

    data = plan_to_json(_plan(FORKED))
    (change,) = [c for c in data["changes"] if c["vm"] == "try-1"]
    assert change["fork_of"] == {
        "vm": "a",
        "memory": False,
        "stops_source": False,
        "force": False,
        "stop_shared_with": [],
    }
    assert all("fork_of" not in c for c in data["changes"] if c["vm"] != "try-1")
