"""The planner: every action kind on each backend type, from records only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.observed import Observation, Ownership
from sand.plan import Action, GuestAction, make_plan
from sand.plan.render import plan_to_json, render_text
from tests.plan.helpers import POLICIES, converged, desired, stale_marker


def by_vm(plan):
    return {c.vm: c for c in plan.changes}


def test_converged_fleet_is_a_noop():
    state = desired()
    plan = make_plan(state, converged(state), POLICIES)
    assert not plan.has_changes
    assert {c.action for c in plan.changes} == {Action.NOOP}
    assert not plan.has_changes
    assert render_text(plan).strip().endswith("No changes. Your VMs match the manifest.")


def test_empty_backends_plan_creates():
    state = desired()
    obs = {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}
    plan = make_plan(state, obs, POLICIES)
    assert [c.action for c in plan.changes] == [Action.CREATE] * 3
    text = render_text(plan)
    assert '  + vm "a" {' in text
    assert "Plan: 3 to add, 0 to change, 0 to destroy." in text


@pytest.mark.parametrize("backend_vm", ["a", "c"])  # a: proxmox, c: lima
def test_memory_change_updates_in_place_with_restart(backend_vm):
    state = desired()
    obs = converged(state)
    backend = "pve" if backend_vm == "a" else "laptop"
    vms = tuple(
        stale_marker(replace(v, memory=4 << 30)) if v.name == backend_vm else v
        for v in obs[backend].vms
    )
    obs[backend] = Observation(backend, vms)
    change = by_vm(make_plan(state, obs, POLICIES))[backend_vm]
    assert change.action is Action.UPDATE
    assert [(f.field, f.before, f.after) for f in change.fields] == [("memory", 4 << 30, 8 << 30)]
    assert change.requires_restart
    text = render_text(make_plan(state, obs, POLICIES))
    assert "will be updated in place (requires restart)" in text
    assert '~ memory = "4GiB" -> "8GiB" # requires restart' in text
    assert "Plan: 0 to add, 1 to change, 0 to destroy." in text


def test_power_state_is_in_place_without_restart():
    state = desired()
    obs = converged(state)
    a = stale_marker(replace(obs["pve"].vms[0], power="stopped"))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    change = by_vm(make_plan(state, obs, POLICIES))["a"]
    assert change.action is Action.UPDATE
    assert not change.requires_restart


@pytest.mark.parametrize("backend", ["pve", "laptop"])
def test_image_change_forces_replacement(backend):
    state = desired()
    obs = converged(state)
    first = obs[backend].vms[0]
    obs[backend] = Observation(
        backend, (stale_marker(first, image="old-image"), *obs[backend].vms[1:])
    )
    plan = make_plan(state, obs, POLICIES)
    change = by_vm(plan)[first.name]
    assert change.action is Action.REPLACE
    assert [f.field for f in change.fields if f.forces_replacement] == ["image"]
    text = render_text(plan)
    assert f'-/+ vm "{first.name}" {{' in text
    assert "# forces replacement" in text
    assert "1 to add" in text and "1 to destroy" in text


def test_disk_shrink_replaces_and_growth_does_not():
    state = desired()
    obs = converged(state)
    a = obs["pve"].vms[0]
    bigger = stale_marker(replace(a, disk=a.disk * 2))
    smaller = stale_marker(replace(a, disk=a.disk // 2))
    for vm, expected in ((bigger, Action.REPLACE), (smaller, Action.UPDATE)):
        obs["pve"] = Observation("pve", (vm, *obs["pve"].vms[1:]))
        assert by_vm(make_plan(state, obs, POLICIES))["a"].action is expected


def test_guest_change_reprovisions_without_touching_the_machine():
    state = desired()
    obs = converged(state)
    a = stale_marker(obs["pve"].vms[0], guest_fingerprint="older-bundle")
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    change = by_vm(make_plan(state, obs, POLICIES))["a"]
    assert change.action is Action.NOOP and change.guest is GuestAction.PROVISION
    assert not change.fields and change.verb == "reprovision"


def test_rotated_secret_redelivers_only_secrets():
    state = desired()
    obs = converged(state)
    a = obs["pve"].vms[0]
    assert a.marker is not None
    a = replace(a, marker=replace(a.marker, secrets="1-" + "0" * 20, secrets_at=1))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    plan = make_plan(state, obs, POLICIES, secret_stamps={"a": "1-" + "1" * 20})
    change = by_vm(plan)["a"]
    assert change.action is Action.NOOP and change.guest is GuestAction.SECRETS
    assert change.reasons == ("secret values changed",)


def test_removed_vm_is_deleted_and_others_untouched():
    state = desired()
    obs = converged(state)
    extra = replace(obs["pve"].vms[0], name="gone", identity="150")
    obs["pve"] = Observation("pve", (*obs["pve"].vms, extra))
    plan = make_plan(state, obs, POLICIES)
    assert [(c.vm, c.action) for c in plan.actionable()] == [("gone", Action.DELETE)]
    assert '  - vm "gone" {' in render_text(plan)
    assert "Plan: 0 to add, 0 to change, 1 to destroy." in render_text(plan)


@pytest.mark.parametrize(
    "ownership", [Ownership.UNMANAGED, Ownership.COPIED, Ownership.OTHER_PROJECT]
)
def test_vms_that_are_not_ours_are_never_deleted(ownership):
    state = desired()
    obs = converged(state)
    stranger = replace(obs["pve"].vms[0], name="stranger", identity="300", ownership=ownership)
    obs["pve"] = Observation("pve", (*obs["pve"].vms, stranger))
    assert not make_plan(state, obs, POLICIES).has_changes


def test_protected_vm_removed_from_manifest_is_blocked_not_deleted():
    state = desired()
    obs = converged(state)
    keep = replace(obs["pve"].vms[0], name="kept", identity="151", protect=True)
    obs["pve"] = Observation("pve", (*obs["pve"].vms, keep))
    change = by_vm(make_plan(state, obs, POLICIES))["kept"]
    assert change.action is Action.BLOCKED and "protected" in change.reasons[0]


def test_locked_vm_is_blocked():
    state = desired()
    obs = converged(state)
    a = stale_marker(replace(obs["pve"].vms[0], lock="clone", memory=1 << 30))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    assert by_vm(make_plan(state, obs, POLICIES))["a"].action is Action.BLOCKED


def test_unknown_backend_blocks_everything_on_it_and_prunes_nothing():
    state = desired()
    obs = converged(state)
    obs["laptop"] = Observation("laptop", (), unknown_reason="limactl list failed (exit 1)")
    plan = make_plan(state, obs, POLICIES)
    assert by_vm(plan)["c"].action is Action.BLOCKED
    assert "limactl list failed" in render_text(plan)
    assert not plan.deletes_by_backend()


def test_unmanaged_lima_instance_holding_the_name_blocks_create():
    state = desired()
    obs = converged(state)
    squatter = replace(obs["laptop"].vms[0], ownership=Ownership.UNMANAGED, marker=None)
    obs["laptop"] = Observation("laptop", (squatter,))
    assert by_vm(make_plan(state, obs, POLICIES))["c"].action is Action.BLOCKED


def test_drift_is_reported_and_corrected_unless_report_only():
    state = desired()
    obs = converged(state)
    a = replace(obs["pve"].vms[0], cpus=8)  # fingerprint still ours: changed outside sand
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    plan = make_plan(state, obs, POLICIES)
    change = by_vm(plan)["a"]
    assert change.action is Action.UPDATE and [f.field for f in change.drift] == ["cpus"]
    assert "Objects have changed outside of sand" in render_text(plan)
    refresh = make_plan(state, obs, POLICIES, refresh_only=True)
    assert not refresh.has_changes and refresh.drifted()
    report = make_plan(state, obs, POLICIES, correct_drift=False)
    assert not report.has_changes and report.drifted()


def test_security_finding_forces_replacement():
    state = desired()
    obs = converged(state)
    c = replace(obs["laptop"].vms[0], findings=("writable mount of /home/me",))
    obs["laptop"] = Observation("laptop", (c,))
    change = by_vm(make_plan(state, obs, POLICIES))["c"]
    assert change.action is Action.REPLACE
    assert change.drift[0].before == "writable mount of /home/me"


def test_adopted_half_created_vm_is_reprovisioned():
    state = desired()
    obs = converged(state)
    a = stale_marker(obs["pve"].vms[0], guest_fingerprint="")
    a = replace(a, marker=replace(a.marker, fingerprint=""))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    change = by_vm(make_plan(state, obs, POLICIES))["a"]
    assert change.action is Action.NOOP and change.guest is GuestAction.PROVISION


def test_json_plan_carries_the_same_records():
    state = desired()
    obs = converged(state)
    obs["pve"] = Observation("pve", (stale_marker(obs["pve"].vms[0], image="x"),))  # b is gone
    data = plan_to_json(make_plan(state, obs, POLICIES))
    actions = {c["vm"]: c["action"] for c in data["changes"]}
    assert actions == {"a": "replace", "b": "create", "c": "no-op"}
    assert data["summary"] == {
        "add": 2,
        "finish": 0,
        "change": 0,
        "destroy": 1,
        "has_changes": True,
    }
    image = data["changes"][0]["fields"][0]
    assert image["field"] == "image" and image["forces_replacement"] is True


def test_observation_fingerprint_moves_when_the_world_does():
    state = desired()
    obs = converged(state)
    before = make_plan(state, obs, POLICIES).observed_fingerprint
    obs["pve"] = Observation("pve", (replace(obs["pve"].vms[0], power="stopped"),))
    assert make_plan(state, obs, POLICIES).observed_fingerprint != before


def test_colour_only_when_asked():
    state = desired()
    plan = make_plan(
        state, {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}, POLICIES
    )
    assert "\x1b[" not in render_text(plan)
    assert "\x1b[32m+\x1b[0m" in render_text(plan, colour=True)


def test_a_change_cannot_hold_an_impossible_guest_action():
    # A delete leaves no guest to touch; a new machine is provisioned whole or not at all.
    import pytest

    from sand.plan.model import VMChange

    with pytest.raises(ValueError, match="delete"):
        VMChange("a", "pve", Action.DELETE, guest=GuestAction.SECRETS)
    with pytest.raises(ValueError, match="create"):
        VMChange("a", "pve", Action.CREATE, guest=GuestAction.SECRETS)
    kept = VMChange("a", "pve", Action.NOOP, guest=GuestAction.SECRETS)
    assert kept.acts and kept.verb == "reprovision"
    blocked = VMChange(
        "a", "pve", Action.BLOCKED, blocked_action=Action.NOOP, guest=GuestAction.PROVISION
    )
    assert not blocked.acts and blocked.would == "reprovision"
