"""Replacement as the engine carries it out, on the in-memory backend: the new VM is made
before the old one goes (after it, where the backend cannot hold both), a failure at
any step before that leaves the old VM as it was, and a run cut short at any step is
settled by the next run into exactly one VM.

The far side is the world (its VMs, markers and the order its steps ran in) and the
journal file. The same behaviours meet the real rigs in ``tests/cli/test_replace_proxmox.py``
(order, a failed start) and ``tests/crash/test_crash_replace.py`` (a kill at every step,
on fakepve and the limactl stand-in)."""

from __future__ import annotations

import pytest

from sand.plan.render import render_text
from sand.state.journal import Journal, journal_path
from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World

OLD, NEW = "debian-12", "debian-13"


def made(fleet: Fleet, world: World) -> str:
    """agent-1 made from the old image; its identity."""
    fleet.write([{"name": "agent-1", "image": OLD}])
    end = fleet.apply()
    assert end.outcome is not None and end.outcome.converged
    (vm,) = world.vms.values()
    fleet.write([{"name": "agent-1", "image": NEW}])
    world.log.clear()
    return vm.identity


def one_vm_of_the_new_image(fleet: Fleet, world: World) -> str:
    (vm,) = world.vms.values()
    assert vm.name == "agent-1" and vm.marker is not None and vm.marker.image == NEW
    assert Journal(journal_path("demo")).pending() == []
    assert not fleet.apply().plan.has_changes  # and the next run has nothing to do
    return vm.identity


def test_the_replacement_is_made_before_the_old_vm_goes(fleet: Fleet, world: World) -> None:
    old = made(fleet, world)

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.converged
    ((verb, strategy),) = [(c.verb, c.strategy.value) for c in end.plan.changes]
    assert (verb, strategy) == ("replace", "create-before-destroy")
    steps = [step for step, name in world.log if step != "lease"]
    names = [name for step, name in world.log if step != "lease"]
    temp = names[0]
    assert temp.startswith("agent-1-sandnew")
    assert list(zip(steps, names, strict=True)) == [
        ("create", temp), ("make", temp), ("start", temp),
        ("delete", "agent-1"),
        ("rename", "agent-1"),
    ]  # fmt: skip
    assert one_vm_of_the_new_image(fleet, world) != old


@pytest.mark.parametrize("step", ["create", "make", "start"])
def test_a_replacement_that_fails_leaves_the_old_vm_as_it_was(
    fleet: Fleet, world: World, step: str
) -> None:
    old = made(fleet, world)
    before = world.snapshot()
    world.fail(step, "no room for it", vm="agent-1")

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.result is not None
    (failed,) = end.outcome.result.failures()
    assert (failed.vm, failed.layer) == ("agent-1", "backend") and "no room" in failed.error
    assert world.snapshot() == before  # the old VM untouched, the replacement gone
    # What is left open in the journal is never about the old VM.
    assert all(e.identity != old for e in Journal(journal_path("demo")).pending())
    world.clear_faults()
    again = fleet.apply()
    assert again.outcome is not None and again.outcome.converged
    assert one_vm_of_the_new_image(fleet, world) != old


# Where a killed run stops: the replacement half-made, made (marked, not started), the
# old VM's delete begun, the old VM gone and the replacement not renamed yet.
# What ``sand plan`` then says the next apply settles first.
CUTS = {
    "make": "no replacement of agent-1 was made; VM",
    "start": "remove the unfinished replacement agent-1-sandnew",
    "delete": "name the replacement agent-1-sandnew",
    "rename": "name the replacement agent-1-sandnew",
}


@pytest.mark.parametrize("step", list(CUTS))
def test_a_run_cut_short_at_any_step_of_a_replace_ends_with_one_vm(
    fleet: Fleet, world: World, step: str
) -> None:
    old = made(fleet, world)
    fleet.cut_at(step, "agent-1")
    kept = {vm.name: vm.identity for vm in world.vms.values() if vm.marker is not None}
    (temp,) = [name for name in kept if name.startswith("agent-1-sandnew")] or [""]
    # Never lost: the person's VM is there, or the replacement made before it went.
    assert old in kept.values() or temp

    said = render_text(fleet.plan(allow_data_loss=True))
    assert f"will recover: {CUTS[step]}" in said, said

    again = fleet.apply()
    assert again.outcome is not None and again.outcome.converged, again.outcome
    new = one_vm_of_the_new_image(fleet, world)
    assert new != old
    if step in ("delete", "rename"):  # the replacement holds the preserved copy: kept
        assert new == kept[temp]


def test_where_both_cannot_stand_the_old_vm_goes_first(fleet: Fleet, world: World) -> None:
    old = made(fleet, world)
    world.cramped = True  # the backend's preflight: no room for the old and the new

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.converged
    (change,) = end.plan.changes
    assert change.strategy.value == "destroy-before-create"
    assert [(step, name) for step, name in world.log if step != "lease"] == [
        ("delete", "agent-1"), ("create", "agent-1"), ("make", "agent-1"), ("start", "agent-1"),
    ]  # fmt: skip
    assert one_vm_of_the_new_image(fleet, world) != old
