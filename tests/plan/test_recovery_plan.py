"""Recovery in the plan, operator protection, and the mass-delete guard, from records only."""

from __future__ import annotations

import json
from dataclasses import replace

from sand.apply.reconcile import mass_delete_problem
from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.observed import Observation, Ownership
from sand.plan import Action, make_plan
from sand.plan.render import plan_to_json, render_text
from sand.survey.recovered import fold_recovery
from tests.plan.helpers import POLICIES, converged, desired, observed_from, stale_marker


def by_vm(plan):
    return {c.vm: c for c in plan.changes}


def half_made_clone(identity: str = "100") -> RecoveryDecision:
    return RecoveryDecision(
        entry="e1",
        backend="pve",
        vm="a",
        op="create",
        identity=identity,
        action=RecoveryAction.DELETE,
        summary=f"delete half-made clone {identity} of a",
        absent=True,
    )


def test_a_vm_recovery_deletes_is_planned_as_absent_and_the_plan_says_so_first():
    state = desired()
    obs = converged(state)
    # What `sand plan` saw after a Ctrl-C mid-clone: a half-made VM at 100 with no
    # converged marker, which alone would plan as "update in place".
    half = stale_marker(replace(obs["pve"].vms[0], cpus=1))
    obs["pve"] = Observation("pve", (half, *obs["pve"].vms[1:]))
    assert by_vm(make_plan(state, obs, POLICIES))["a"].action is Action.UPDATE

    decision = half_made_clone()
    plan = make_plan(state, fold_recovery(obs, [decision]), POLICIES, recovery=[decision])

    assert by_vm(plan)["a"].action is Action.CREATE
    assert plan.has_changes and plan.counts() == (1, 0, 0)
    text = render_text(plan)
    line = "  # a (pve, 100) will recover: delete half-made clone 100 of a, then create"
    assert line in text
    assert text.index(line) < text.index("sand will perform the following actions:")
    data = plan_to_json(plan)
    assert data["recovery"] == [
        decision.to_json_dict()
        | {"line": "will recover: delete half-made clone 100 of a, then create"}
    ]
    assert data["summary"]["has_changes"] is True
    from tests.machine_schemas import validate

    validate("plan", json.loads(json.dumps(data, default=str)))


def test_a_recovery_that_leaves_nothing_else_to_do_still_counts_as_pending_work():
    state = desired()
    obs = converged(state)
    stray = observed_from(state.vms[0], "555", name="a-old")
    obs["pve"] = Observation("pve", (*obs["pve"].vms, stray))
    decision = replace(half_made_clone("555"), vm="a-old")
    plan = make_plan(state, fold_recovery(obs, [decision]), POLICIES, recovery=[decision])
    assert not plan.actionable() and plan.has_changes
    text = render_text(plan)
    assert "will recover: delete half-made clone 555 of a" in text
    assert "No other changes: once recovered, your VMs match the manifest." in text


def test_a_moot_entry_is_shown_but_is_no_change():
    state = desired()
    decision = replace(
        half_made_clone(),
        action=RecoveryAction.MOOT,
        summary="the interrupted delete of a is moot: VM 100 is not the VM it acted on",
        absent=False,
    )
    plan = make_plan(state, converged(state), POLICIES, recovery=[decision])
    assert not plan.has_changes
    assert "will recover: the interrupted delete of a is moot" in render_text(plan)


def test_recovery_clears_an_unknown_listing_caused_only_by_what_it_removes():
    state = desired()
    obs = converged(state)
    half = observed_from(state.vms[2], "c", lock="no lima.yaml (being cloned or deleted?)")
    obs["laptop"] = Observation(
        "laptop", (half,), unknown_reason="instance c has no lima.yaml", unknown_because=("c",)
    )
    decision = replace(half_made_clone("c"), backend="laptop", vm="c")
    folded = fold_recovery(obs, [decision])
    assert folded["laptop"].unknown_reason is None and folded["laptop"].vms == ()
    # Something else unreadable too: still unknown.
    obs["laptop"] = replace(obs["laptop"], unknown_because=("c", "d"))
    assert fold_recovery(obs, [decision])["laptop"].unknown_reason


def test_operator_protection_is_never_proposed_for_lifting():
    state = desired()
    obs = converged(state)
    a = stale_marker(replace(obs["pve"].vms[0], protect=True, operator_protected=True, cpus=1))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    plan = make_plan(state, obs, POLICIES)
    change = by_vm(plan)["a"]
    assert change.action is Action.UPDATE
    assert [f.field for f in change.fields] == ["cpus"]  # not protect: true -> false
    assert any("protection was set outside sand" in w for w in plan.warnings)
    assert "protect" not in render_text(plan).split("sand will perform")[1]
    # Protection sand set is lifted as the manifest says.
    sand_set = replace(a, operator_protected=False)
    obs["pve"] = Observation("pve", (sand_set, *obs["pve"].vms[1:]))
    fields = [f.field for f in by_vm(make_plan(state, obs, POLICIES))["a"].fields]
    assert "protect" in fields


def test_an_operator_protected_vm_that_must_be_replaced_or_pruned_stays_blocked():
    state = desired()
    obs = converged(state)
    a = stale_marker(
        replace(obs["pve"].vms[0], protect=True, operator_protected=True),
        image="template:other@local-lvm",
    )
    gone = observed_from(state.vms[0], "150", name="old", protect=True, operator_protected=True)
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:], gone))
    plan = by_vm(make_plan(state, obs, POLICIES))
    assert plan["a"].action is Action.BLOCKED and plan["old"].action is Action.BLOCKED


def test_another_backends_vm_is_never_planned():
    state = desired()
    obs = converged(state)
    theirs = observed_from(state.vms[0], "300", name="theirs", ownership=Ownership.OTHER_BACKEND)
    obs["pve"] = Observation("pve", (*obs["pve"].vms, theirs))
    plan = make_plan(state, obs, POLICIES)
    assert "theirs" not in by_vm(plan) and not plan.has_changes and not plan.warnings
    # Made by an entry the manifest no longer has (a renamed backend): said, not touched.
    assert theirs.marker is not None
    renamed = replace(theirs, marker=replace(theirs.marker, backend="old-name"))
    obs["pve"] = Observation("pve", (*obs["pve"].vms[:-1], renamed))
    plan = make_plan(state, obs, POLICIES)
    assert "theirs" not in by_vm(plan) and not plan.has_changes
    assert any("backend entry 'old-name'" in w and "renamed?" in w for w in plan.warnings)


def _plan_with(deletes: int, replaces: int, keep: int, backend: str = "pve"):
    """A plan on one backend: ``deletes`` pruned, ``replaces`` replaced, ``keep`` kept."""
    state = desired()
    vm = state.vms[0]
    obs_vms = []
    wanted = []
    for i in range(deletes + replaces + keep):
        obs_vms.append(observed_from(vm, str(200 + i), name=f"v{i}", backend=backend))
    for i in range(deletes, deletes + replaces + keep):
        wanted.append(replace(vm, name=f"v{i}", backend=backend))
    for i in range(deletes, deletes + replaces):
        obs_vms[i] = stale_marker(obs_vms[i], image="template:other@local-lvm")
    state = replace(state, vms=tuple(wanted))
    return state, Observation(backend, tuple(obs_vms))


def test_the_mass_delete_guard_counts_replacements():
    state, obs = _plan_with(deletes=0, replaces=2, keep=1)
    plan = make_plan(state, {"pve": obs}, POLICIES)
    assert [c.action for c in plan.changes].count(Action.REPLACE) == 2
    problem = mass_delete_problem(plan)
    assert problem and "deletes or replaces 2 of 3" in problem
    state, obs = _plan_with(deletes=0, replaces=1, keep=2)
    assert mass_delete_problem(make_plan(state, {"pve": obs}, POLICIES)) is None
    state, obs = _plan_with(deletes=1, replaces=1, keep=1)
    assert mass_delete_problem(make_plan(state, {"pve": obs}, POLICIES))


def test_the_mass_delete_guard_counts_across_backends():
    # Half of each of two backends: not more than half of the project either.
    one, obs_one = _plan_with(deletes=1, replaces=0, keep=1, backend="pve")
    two, obs_two = _plan_with(deletes=1, replaces=0, keep=1, backend="laptop")
    state = replace(one, vms=one.vms + two.vms)
    plan = make_plan(state, {"pve": obs_one, "laptop": obs_two}, POLICIES)
    assert mass_delete_problem(plan) is None
    # The only VM of each of two backends replaced: no backend loses more than one VM,
    # but the project loses every VM it has.
    one, obs_one = _plan_with(deletes=0, replaces=1, keep=0, backend="pve")
    two, obs_two = _plan_with(deletes=0, replaces=1, keep=0, backend="laptop")
    state = replace(one, vms=one.vms + two.vms)
    assert mass_delete_problem(make_plan(state, {"pve": obs_one}, POLICIES)) is None
    plan = make_plan(state, {"pve": obs_one, "laptop": obs_two}, POLICIES)
    problem = mass_delete_problem(plan)
    assert problem and "deletes or replaces 2 of 2 managed VMs across 2 backends" in problem
