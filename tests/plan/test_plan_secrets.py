"""The planner's secrets rules: the VM's own stamp, and a boot after the last delivery."""

from __future__ import annotations

import time
from dataclasses import replace

from sand.observed import Observation, ObservedVM
from sand.plan import Action, GuestAction, make_plan
from sand.plan.planner import BOOT_SKEW
from sand.plan.render import render_text
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired, stale_marker

NOW_STAMP = "1-" + "a" * 20
OLD_STAMP = "1-" + "b" * 20
DELIVERED = 1_700_000_000


def stamped(vm: ObservedVM, stamp: str = NOW_STAMP, at: int = DELIVERED, **changes: object):
    assert vm.marker is not None
    return replace(vm, marker=replace(vm.marker, secrets=stamp, secrets_at=at), **changes)


def plan_for(vm: ObservedVM, *, stamps=None, lost=None):
    state = desired()
    obs = converged(state)
    obs["pve"] = Observation("pve", (vm, *obs["pve"].vms[1:]))
    plan = make_plan(
        state, obs, POLICIES, secret_stamps={"a": NOW_STAMP} | (stamps or {}), secrets_lost=lost
    )
    return plan, {c.vm: c for c in plan.changes}["a"]


def first_vm() -> ObservedVM:
    return converged(desired())["pve"].vms[0]


def test_the_stamp_on_the_vm_equal_to_the_values_now_is_no_change():
    plan, change = plan_for(stamped(first_vm(), booted_at=DELIVERED - 30.0))
    assert change.action is Action.NOOP and not change.acts
    assert not plan.has_changes


def test_another_stamp_means_the_values_changed():
    _, change = plan_for(stamped(first_vm(), OLD_STAMP))
    assert change.action is Action.NOOP and change.guest is GuestAction.SECRETS
    assert change.reasons == ("secret values changed",)


def test_a_vm_without_a_stamp_is_delivered_once():
    _, change = plan_for(first_vm())  # what an older sand left: no stamp recorded
    assert change.action is Action.NOOP and change.guest is GuestAction.SECRETS
    assert "not recorded" in change.reasons[0]


def test_a_boot_after_the_delivery_means_the_tmpfs_was_emptied():
    booted = DELIVERED + BOOT_SKEW + 5
    plan, change = plan_for(stamped(first_vm(), booted_at=booted))
    assert change.action is Action.NOOP and change.guest is GuestAction.SECRETS
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(DELIVERED))
    assert change.reasons == (f"secrets lost (guest rebooted after their delivery at {when})",)
    assert f"secrets lost (guest rebooted after their delivery at {when})" in render_text(plan)


def test_a_boot_just_before_or_within_the_clock_skew_of_the_delivery_is_not():
    # sand started the VM, then delivered: the boot precedes the delivery, and two
    # hosts' clocks may disagree by some seconds.
    for booted in (DELIVERED - 20.0, DELIVERED + BOOT_SKEW - 1):
        _, change = plan_for(stamped(first_vm(), booted_at=booted))
        assert change.action is Action.NOOP and not change.acts, booted


def test_a_stopped_vm_needs_no_delivery_whatever_its_stamp():
    # Its tmpfs is empty anyway; whatever starts it next delivers (sand) or shows as a boot.
    state = desired(MANIFEST.replace("  - name: a\n", "  - name: a\n    state: stopped\n"))
    a = converged(state)["pve"].vms[0]
    assert a.power == "stopped"
    for vm in (stamped(a), stamped(a, OLD_STAMP), a):
        obs = converged(state)
        obs["pve"] = Observation("pve", (vm, *obs["pve"].vms[1:]))
        plan = make_plan(state, obs, POLICIES, secret_stamps={"a": NOW_STAMP})
        assert not plan.has_changes, plan.changes


def test_a_guest_check_that_found_the_files_gone_plans_a_delivery():
    _, change = plan_for(stamped(first_vm()), lost={"a": "secrets lost (gone)"})
    assert change.action is Action.NOOP and change.guest is GuestAction.SECRETS
    assert change.reasons == ("secrets lost (gone)",)


def test_lost_secrets_ride_along_with_an_in_place_update():
    vm = stale_marker(stamped(first_vm(), booted_at=DELIVERED + 3600.0))
    vm = replace(vm, cpus=(vm.cpus or 1) + 1)
    _, change = plan_for(vm)
    assert change.action is Action.UPDATE and change.guest is GuestAction.SECRETS
    assert any(r.startswith("secrets lost") for r in change.reasons)


def test_vms_without_secrets_are_never_planned_for_delivery():
    state = desired()
    obs = converged(state)
    b = obs["pve"].vms[1]
    obs["pve"] = Observation("pve", (stamped(obs["pve"].vms[0]), replace(b, booted_at=time.time())))
    plan = make_plan(state, obs, POLICIES, secret_stamps={"a": NOW_STAMP})
    assert not plan.has_changes
