"""``--target`` and ``--replace`` as steps on a finished plan: pure records in and out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.apply.reconcile import mass_delete_problem
from sand.errors import PlanRefused
from sand.observed import Observation
from sand.plan import Action, GuestAction, Strategy, make_plan
from sand.plan.render import plan_to_json, render_text
from sand.plan.targeting import steer, targeted, with_replacements
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired, stale_marker


def by_vm(plan):
    return {c.vm: c for c in plan.changes}


def test_changes_not_targeted_stay_as_no_ops_with_what_was_observed():
    state = desired()
    obs = converged(state)
    obs["pve"] = Observation("pve", tuple(stale_marker(replace(v, cpus=1)) for v in obs["pve"].vms))
    plan = targeted(make_plan(state, obs, POLICIES), ["a"])
    a, b = by_vm(plan)["a"], by_vm(plan)["b"]
    assert a.action is Action.UPDATE and [f.field for f in a.fields] == ["cpus"]
    assert b.action is Action.NOOP and not b.fields and not b.acts and b.observed is not None
    assert b.reasons == ("not targeted: left as it is",)
    assert plan.targets == ("a",) and plan_to_json(plan)["targets"] == ["a"]
    assert plan.counts() == (0, 1, 0)
    text = render_text(plan)
    assert text.startswith("Warning: Resource targeting is in effect: only a is planned")
    assert "# b (pve" not in text


def test_the_mass_delete_guard_still_counts_every_vm():
    obs = converged(desired())
    without_b = desired(MANIFEST.replace("  - name: b\n    memory: 16GiB\n", ""))
    plan = make_plan(without_b, obs, POLICIES)
    assert by_vm(plan)["b"].action is Action.DELETE
    one = targeted(plan, ["b"])
    assert mass_delete_problem(one) is None
    # Judged on the targets alone it would be every VM: the no-ops keep the fleet counted.
    alone = replace(one, changes=tuple(c for c in one.changes if c.vm == "b"))
    assert mass_delete_problem(alone) is not None
    only_c = desired(
        MANIFEST.replace("  - name: a\n", "").replace("  - name: b\n    memory: 16GiB\n", "")
    )
    assert mass_delete_problem(targeted(make_plan(only_c, obs, POLICIES), ["a", "b"]))


def test_a_blocked_change_not_targeted_does_not_fail_the_run():
    state = desired()
    obs = converged(state)
    obs["laptop"] = Observation("laptop", (), unknown_reason="limactl failed")
    plan = make_plan(state, obs, POLICIES)
    assert by_vm(plan)["c"].action is Action.BLOCKED and plan.unknown_backends
    aimed = targeted(plan, ["a"])
    assert by_vm(aimed)["c"].action is Action.NOOP and not aimed.unknown_backends
    assert any("backend 'laptop' is unknown this run" in w for w in aimed.warnings)
    on_it = targeted(plan, ["c"])
    assert by_vm(on_it)["c"].action is Action.BLOCKED and "laptop" in on_it.unknown_backends


def test_an_unknown_target_is_refused():
    state = desired()
    plan = make_plan(state, converged(state), POLICIES)
    with pytest.raises(PlanRefused, match="--target 'nope'"):
        targeted(plan, ["a", "nope"])


def test_replace_forces_a_provisioned_create_before_destroy():
    state = desired()
    plan = with_replacements(make_plan(state, converged(state), POLICIES), ["a"])
    a = by_vm(plan)["a"]
    assert a.action is Action.REPLACE and a.guest is GuestAction.PROVISION
    assert a.strategy is Strategy.CREATE_BEFORE_DESTROY
    assert a.reasons == ("replacement requested with --replace",)
    assert by_vm(plan)["b"].action is Action.NOOP and plan.replacements == ("a",)
    assert plan.counts() == (1, 0, 1)


def test_replace_of_a_protected_vm_is_blocked_and_of_an_absent_one_creates():
    state = desired()
    obs = converged(state)
    obs["pve"] = Observation(
        "pve", tuple(replace(v, protect=True) if v.name == "a" else v for v in obs["pve"].vms)
    )
    obs["laptop"] = Observation("laptop", ())
    plan = steer(make_plan(state, obs, POLICIES), replace_vms=["a", "c"])
    a, c = by_vm(plan)["a"], by_vm(plan)["c"]
    assert a.action is Action.BLOCKED and "must be replaced but is protected" in a.reasons[1]
    assert c.action is Action.CREATE


def test_replace_names_a_vm_of_the_manifest():
    state = desired()
    obs = converged(state)
    gone = replace(obs["pve"].vms[0], name="old", identity="150")
    obs["pve"] = Observation("pve", (*obs["pve"].vms, gone))
    plan = make_plan(state, obs, POLICIES)
    with pytest.raises(PlanRefused, match="not a VM of the manifest"):
        with_replacements(plan, ["old"])
