"""What a run cut short leaves, as the next ``sand plan`` shows it and the next apply
settles it; how the engine spreads its work (a bound on VMs in flight, a failure or a
failed golden base stopping only what depends on it): on the in-memory backend, where
a cut is exact (a step held at a gate, the run cancelled there) and nothing waits.

The far side is the world and the journal file. The same recovery meets the real rigs
in ``tests/cli/test_recovery_plan.py`` (fakepve, killed with SIGKILL), the contract
suite (each backend's decision) and ``tests/crash/`` (a kill at every step)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sand.plan.render import plan_to_json, render_text
from sand.state.journal import Journal, journal_path
from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World

TWO = [{"name": "a"}, {"name": "b"}]


def planned(fleet: Fleet) -> tuple[str, dict[str, Any]]:
    """What ``sand plan`` prints, and its JSON."""
    made = fleet.plan()
    return render_text(made), plan_to_json(made)


def test_the_plan_after_a_run_cut_before_the_marker_says_recover_then_create(
    fleet: Fleet, world: World
) -> None:
    fleet.write(TWO)
    fleet.cut_at("make", "a", parallelism=1)
    (half,) = world.vms.values()
    assert (half.name, half.marker) == ("a", None)  # made, never marked
    before = world.snapshot()

    text, data = planned(fleet)

    assert f"# a (box, {half.identity}) will recover: delete half-made {half.identity}, " in text
    assert ", then create" in text, text
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in text
    assert world.snapshot() == before  # a plan touches nothing
    (recovery,) = data["recovery"]
    assert (recovery["action"], recovery["identity"], recovery["absent"]) == (
        "delete",
        half.identity,
        True,
    )

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.converged
    assert [line.split(":")[0] for line in end.outcome.recovered] == ["create of a (box)"]
    assert sorted(vm.name for vm in world.vms.values()) == ["a", "b"]
    assert half.identity not in world.vms  # removed, never adopted
    assert Journal(journal_path("demo")).pending() == []
    assert not fleet.apply().plan.has_changes


def test_the_plan_after_a_run_cut_after_the_marker_adopts_the_vm(
    fleet: Fleet, world: World
) -> None:
    fleet.write(TWO)
    fleet.cut_at("start", "a", parallelism=1)
    (marked,) = world.vms.values()

    text, _ = planned(fleet)

    assert f"# a (box, {marked.identity}) will recover: adopt a ({marked.identity})" in text
    assert "Plan: 1 to add, 1 to finish, 0 to change, 0 to destroy." in text, text
    assert "# a (box, " in text and "will be finished: adopted from the journal" in text
    end = fleet.apply()
    assert end.outcome is not None and end.outcome.converged
    assert sorted(vm.name for vm in world.vms.values()) == ["a", "b"]
    assert world.vms[marked.identity].power == "running"  # the same VM, finished


@pytest.mark.parametrize("step", ["create", "make", "start"])
def test_a_run_cut_at_any_step_of_a_create_ends_with_each_vm_once(
    fleet: Fleet, world: World, step: str
) -> None:
    fleet.write(TWO)
    fleet.cut_at(step, "b")  # a may be made by then, or not

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.converged
    assert sorted(vm.name for vm in world.vms.values()) == ["a", "b"]  # no twin, no orphan
    assert all(vm.marker is not None and vm.power == "running" for vm in world.vms.values())
    assert Journal(journal_path("demo")).pending() == []


def test_creates_run_at_most_parallelism_at_once_and_a_failure_stops_no_other(
    fleet: Fleet, world: World
) -> None:
    names = [f"vm-{i}" for i in range(5)]
    fleet.write([{"name": n} for n in names])
    world.fail("create", "no room for it", vm="vm-1")
    gate = world.hold("start")

    async def run() -> None:
        task = asyncio.ensure_future(fleet.apply_async(parallelism=2))
        await asyncio.wait_for(gate.reached.wait(), 30)

        async def two_made() -> None:
            while len(world.vms) < 2:  # vm-1 failed and gave its slot to vm-2
                await asyncio.sleep(0)

        await asyncio.wait_for(two_made(), 30)
        for _ in range(200):  # whatever else could start now, starts
            await asyncio.sleep(0)
        assert len(world.vms) == 2  # two in flight; the rest wait for a slot
        gate.open()
        end = await task
        assert end.outcome is not None and end.outcome.result is not None
        (failed,) = end.outcome.result.failures()
        assert (failed.vm, failed.layer) == ("vm-1", "backend")
        assert not end.outcome.ok

    asyncio.run(run())
    assert sorted(vm.name for vm in world.vms.values()) == [n for n in names if n != "vm-1"]
    assert all(vm.power == "running" for vm in world.vms.values())


def test_a_golden_base_that_fails_to_build_fails_only_the_vms_made_from_it(
    fleet: Fleet, world: World
) -> None:
    fleet.write(
        [{"name": "from-base", "image": "wb"}, {"name": "plain"}],
        images={"wb": {"packages": ["jq"]}},
    )
    world.fail("build", "out of space")

    end = fleet.apply()

    assert end.outcome is not None and end.outcome.result is not None
    result = end.outcome.result
    ((base, why),) = [(b.base, b.error) for b in result.base_failures()]
    assert base == "wb" and "out of space" in why
    (failed,) = result.failures()
    assert (failed.vm, failed.layer) == ("from-base", "base")
    assert failed.error.startswith("its golden base could not be built: ")
    assert [vm.name for vm in world.vms.values()] == ["plain"]  # nothing half-built left
    assert [step for step, _ in world.log if step == "create"] == ["create"]
