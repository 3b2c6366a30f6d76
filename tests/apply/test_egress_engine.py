"""The apply run and an egress policy, on a backend that enforces one (the in-memory
backend declares it): the VM is made with its policy before it first starts, a changed
policy is changed in place on the same VM, a policy changed behind sand's back is
restored, and dropping it opens the VM."""

from __future__ import annotations

import asyncio

from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World

CLOSED = {"domains": ["github.com"], "cidrs": ["10.20.0.0/16"]}


def the_vm(world: World):  # type: ignore[no-untyped-def]
    (vm,) = world.named("a")
    return vm


def test_the_vm_holds_its_policy_before_it_first_starts(fleet: Fleet, world: World):
    fleet.write([{"name": "a", "egress": CLOSED}])
    gate = world.hold("start", vm="a")
    seen: list[object] = []

    async def run() -> None:
        task = asyncio.ensure_future(fleet.apply_async())
        await asyncio.wait_for(gate.reached.wait(), 30)
        seen.append(the_vm(world).spec.get("egress"))  # made, not yet started
        gate.open()
        end = await task
        assert end.outcome is not None and end.outcome.ok

    asyncio.run(run())
    assert str(seen[0]).startswith("deny except 1 domain, 1 cidr on port 443 #")
    assert [step for step, name in world.log if name == "a"] == ["create", "make", "start"]
    assert not fleet.plan().has_changes


def test_a_changed_policy_is_changed_in_place_on_the_same_vm(fleet: Fleet, world: World):
    fleet.write([{"name": "a", "egress": CLOSED}])
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    before = the_vm(world)
    fleet.write([{"name": "a", "egress": {**CLOSED, "ports": [443, 22]}}])
    (change,) = fleet.plan().changes
    assert (change.verb, [f.field for f in change.fields]) == ("update", ["egress"])
    world.log.clear()
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    after = the_vm(world)
    assert after.identity == before.identity and after.power == "running"
    assert str(after.spec["egress"]).startswith("deny except 1 domain, 1 cidr on ports 22,443 #")
    assert [e for e in world.log if e[1] == "a"] == [("update", "a")]  # no restart, no new VM
    assert not fleet.plan().has_changes


def test_a_policy_opened_behind_sands_back_is_drift_apply_restores(fleet: Fleet, world: World):
    fleet.write([{"name": "a", "egress": CLOSED}])
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    enforced = the_vm(world).spec["egress"]
    the_vm(world).spec["egress"] = "allow"  # someone opened it on the backend
    (change,) = fleet.plan().changes
    assert [(f.field, f.before, f.after) for f in change.drift] == [("egress", "allow", enforced)]
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    assert the_vm(world).spec["egress"] == enforced


def test_dropping_the_policy_opens_the_vm(fleet: Fleet, world: World):
    fleet.write([{"name": "a", "egress": CLOSED}])
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    fleet.write([{"name": "a"}])
    (change,) = fleet.plan().changes
    assert [(f.field, f.after) for f in change.fields] == [("egress", "allow")]
    assert fleet.apply().outcome.ok  # type: ignore[union-attr]
    assert "egress" not in the_vm(world).spec
    assert not fleet.plan().has_changes
