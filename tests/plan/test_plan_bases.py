"""The golden bases a plan builds, clones from and deletes; VMs out of date (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.observed import Observation, ObservedBase
from sand.plan import Action, BaseAction, make_plan
from sand.plan.bases import with_bases
from sand.plan.render import plan_to_json, render_text
from sand.plan.targeting import steer
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired

IMAGES = """\
images:
  wb:
    packages: [jq]
    agents: [claude, codex]
"""
# Every VM made from image wb: a and b on Proxmox, c on Lima.
GOLDEN = (
    MANIFEST.replace("defaults:\n", IMAGES + "defaults:\n")
    .replace("  cpus: 2\n", "  cpus: 2\n  image: wb\n")
    .replace("    image: debian-12\n", "")
)


def plan_for(text, observations=None, **kwargs):
    state = desired(text)
    obs = observations if observations is not None else empty()
    plan = steer(make_plan(state, obs, POLICIES), **kwargs)
    return with_bases(plan, state, obs), state


def empty():
    return {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}


def ready(state, backend="pve", made=(), **kw):
    vm = next(v for v in state.vms if v.backend == backend)
    assert vm.base is not None
    return ObservedBase(backend, vm.base.name, "9100", vm.base.fingerprint, True, made, **kw)


def with_base(obs, backend, *bases):
    return {**obs, backend: replace(obs[backend], bases=(*obs[backend].bases, *bases))}


def made_from(obs, backend, fingerprint):
    """Every VM of ``backend`` as made from the base ``fingerprint``."""
    vms = tuple(replace(v, marker=replace(v.marker, base=fingerprint)) for v in obs[backend].vms)
    return {**obs, backend: replace(obs[backend], vms=vms)}


def test_new_vms_of_an_image_are_cloned_from_its_base_built_once():
    plan, _state = plan_for(GOLDEN)
    builds = [b for b in plan.bases if b.action is BaseAction.BUILD]
    # One base per backend the image is used on (a and b share the Proxmox one).
    assert sorted((b.backend, b.for_vms) for b in builds) == [
        ("laptop", ("c",)),
        ("pve", ("a", "b")),
    ]
    a, b, _c = plan.changes
    assert a.base == b.base == builds[[x.backend for x in builds].index("pve")].fingerprint
    text = render_text(plan)
    assert '# golden base "wb" (pve) will be built' in text
    assert '+ packages    = ["jq"]' in text and "made from it this run: a, b" in text
    assert "Golden bases: 2 to build, 0 to delete." in text
    assert 'cloned from golden base "wb"' in text
    data = plan_to_json(plan)
    assert [x["action"] for x in data["bases"]] == ["build", "build"]
    assert data["changes"][0]["base"] == a.base


def test_a_ready_base_is_used_and_no_second_build_planned():
    state = desired(GOLDEN)
    obs = with_base(empty(), "pve", ready(state))
    plan, _ = plan_for(GOLDEN, obs)
    assert [(b.backend, b.action) for b in plan.bases] == [("laptop", BaseAction.BUILD)]
    assert plan.changes[0].base == ready(state).fingerprint


def test_a_changed_image_rebuilds_its_base_and_leaves_its_vms_out_of_date():
    old_state = desired(GOLDEN)
    old_fp = ready(old_state).fingerprint
    obs = made_from(converged(old_state), "pve", old_fp)
    obs = made_from(obs, "laptop", ready(old_state, "laptop").fingerprint)
    obs = with_base(obs, "pve", ready(old_state, made=("a", "b")))
    changed = GOLDEN.replace("packages: [jq]", "packages: [jq, tmux]")
    plan, state = plan_for(changed, obs)
    # The VMs themselves are unchanged (their fingerprints do not cover the image).
    assert [c.action for c in plan.changes] == [Action.NOOP] * 3
    assert [c.vm for c in plan.out_of_date()] == ["a", "b", "c"]
    assert "made from an earlier build of image 'wb'" in (plan.changes[0].out_of_date or "")
    # The new base is built once per backend; the old one is kept: VMs were made from it.
    assert sorted(b.backend for b in plan.bases if b.action is BaseAction.BUILD) == [
        "laptop",
        "pve",
    ]
    assert not [b for b in plan.bases if b.action is BaseAction.DELETE]
    text = render_text(plan)
    assert "Out of date: made from a golden image that changed since" in text
    assert "# a (pve, 100): made from an earlier build" in text
    assert plan_to_json(plan)["changes"][0]["out_of_date"].startswith("made from an earlier")
    # Once built, a plan has nothing to do, and says the VMs are out of date.
    built = with_base(obs, "pve", ready(state))
    built = with_base(built, "laptop", replace(ready(state, "laptop"), identity="sand-base-x"))
    again, _ = plan_for(changed, built)
    assert not again.has_changes
    assert "No changes. Your VMs match the manifest, but for the ones out of date" in render_text(
        again
    )


def test_rebuild_on_base_change_replaces_but_never_a_protected_vm():
    old_state = desired(GOLDEN)
    obs = made_from(converged(old_state), "pve", ready(old_state).fingerprint)
    obs = with_base(obs, "pve", ready(old_state, made=("a", "b")))
    text = GOLDEN.replace("packages: [jq]", "packages: [jq, tmux]").replace(
        "  image: wb\n", "  image: wb\n  rebuild: onBaseChange\n"
    )
    obs = {
        **obs,
        "pve": replace(
            obs["pve"], vms=(obs["pve"].vms[0], replace(obs["pve"].vms[1], protect=True))
        ),
    }
    plan, state = plan_for(text, obs)
    a, b, _ = plan.changes
    assert a.action is Action.REPLACE and a.base == state.vms[0].base.fingerprint
    assert "rebuild: onBaseChange replaces it" in " ".join(a.reasons)
    assert b.action is Action.BLOCKED and b.blocked_action is Action.REPLACE
    assert "protected" in " ".join(b.reasons)


def test_the_old_base_goes_once_no_vm_was_made_from_it_and_nothing_holds_it():
    old_state = desired(GOLDEN)
    changed = GOLDEN.replace("packages: [jq]", "packages: [jq, tmux]")
    state = desired(changed)
    old = ready(old_state)
    current = replace(ready(state), identity="9200")
    obs = with_base(empty(), "pve", old, current)
    plan, _ = plan_for(changed, obs)
    deletes = [b for b in plan.bases if b.action is BaseAction.DELETE]
    assert [(d.identity, d.fingerprint) for d in deletes] == [("9100", old.fingerprint)]
    assert "none was made from it" in deletes[0].reasons[0]
    # Held by a lock or a clone in flight: not now, and the plan says why.
    busy = with_base(empty(), "pve", replace(old, busy="a clone is running"), current)
    plan, _ = plan_for(changed, busy)
    assert not [b for b in plan.bases if b.action is BaseAction.DELETE]
    assert any("is not deleted now: a clone is running" in w for w in plan.warnings)
    # A VM made from it keeps it, until this plan's own delete of that VM.
    kept = with_base(empty(), "pve", replace(old, made=("gone-1",)), current)
    plan, _ = plan_for(changed, kept)
    assert not [b for b in plan.bases if b.action is BaseAction.DELETE]


def test_a_half_made_base_is_deleted_and_never_cloned_from():
    state = desired(GOLDEN)
    half = replace(ready(state), ready=False)
    plan, _ = plan_for(GOLDEN, with_base(empty(), "pve", half))
    assert plan.changes[0].base == half.fingerprint  # from a new build, not from the half one
    actions = sorted((b.action.value, b.identity or "") for b in plan.bases if b.backend == "pve")
    assert actions == [("build", ""), ("delete", "9100")]


def test_a_derived_base_only_for_two_creates_sharing_their_content():
    plan, state = plan_for(MANIFEST)
    builds = [b for b in plan.bases if b.action is BaseAction.BUILD]
    assert [(b.backend, b.for_vms, b.desired.declared) for b in builds] == [
        ("pve", ("a", "b"), False)
    ]
    assert plan.changes[2].base is None  # c alone on its backend: made directly
    # One create alone: no base, unless one is ready.
    only_a, _ = plan_for(MANIFEST, {"pve": converged(state)["pve"], "laptop": empty()["laptop"]})
    assert only_a.bases == () or all(b.backend != "pve" for b in only_a.bases)
    off = MANIFEST.replace("    type: lima\n", "    type: lima\n    derive_bases: false\n")
    plan, _ = plan_for(
        off.replace("    memory: 16GiB\n", "    backend: laptop\n    image: debian-12\n")
    )
    assert plan.bases == ()


@pytest.mark.parametrize(("disk", "derived"), [("8GiB", False), ("10GiB", True)])
def test_lima_derives_no_base_for_vms_smaller_than_its_base(disk, derived):
    """A Lima clone's disk only grows from its base's (10 GiB; ``limactl clone`` refuses
    to shrink it): two VMs of 8 GiB were planned onto a derived base, and both clones
    failed (found on the real Lima). Such VMs are made directly."""
    text = MANIFEST.replace("  - name: c\n", f"  - name: c\n    disk: {disk}\n") + (
        f"  - name: d\n    backend: laptop\n    image: debian-12\n    disk: {disk}\n"
    )
    plan, _ = plan_for(text)
    lima = [b.for_vms for b in plan.bases if b.backend == "laptop"]
    assert lima == ([("c", "d")] if derived else [])
    assert all((c.base is not None) is derived for c in plan.changes if c.backend == "laptop")


def test_a_targeted_plan_builds_only_what_its_targets_need_and_deletes_nothing():
    old_state = desired(GOLDEN)
    obs = with_base(empty(), "pve", replace(ready(old_state), identity="9300", fingerprint="old"))
    plan, _ = plan_for(GOLDEN, obs, targets=["a"])
    assert [(b.backend, b.for_vms) for b in plan.bases] == [("pve", ("a",))]
