"""The ids clones go to: one ``/cluster/nextid`` per batch, then counted by this process,
so its own clones never meet; PVE's "already exists" (another client, a guest the token
cannot see) stays the one retry, with the next free id. Counted on fakepve's request log,
on both profiles."""

from __future__ import annotations

import asyncio

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

PROFILES = [
    pytest.param(8, marks=pytest.mark.fakepve_rig(pve_version=8), id="pve8"),
    pytest.param(9, marks=pytest.mark.fakepve_rig(pve_version=9), id="pve9"),
]


def _clones(rig: FakePveRig) -> tuple[list[int], list[int]]:
    """(statuses of the clone requests, vmids asked for), in order."""
    posts = rig.requests("POST", contains="/clone")
    return [r.status for r in posts], [new for _, new, _ in rig.run(lambda: rig.pve.clone_sources)]


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_batch_of_creates_asks_for_an_id_once_and_no_clone_is_refused(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    n = 30
    vms = rig.desired([{"name": f"c-{i}"} for i in range(n)])
    await backend.observe(vms)
    # Answers that arrive late (a loaded host): an id PVE gave may be taken by the time
    # it is read, and clones asking at once overlap.
    rig.delay_answers("GET", "/cluster/nextid", 0.05)
    rig.clear_log()
    made = await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    statuses, asked = _clones(rig)
    assert rig.count("GET", "/cluster/nextid") == 1
    assert statuses == [200] * n  # none refused "already exists", none sent twice
    ids = sorted(int(m.identity) for m in made)
    assert ids == list(range(100, 100 + n)) and sorted(asked) == ids
    assert sorted(vm.vmid for vm in rig.vms()) == ids


@pytest.mark.parametrize("profile", PROFILES)
async def test_an_id_another_client_holds_is_refused_once_then_the_next_free_is_taken(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    # A guest in no pool: the pool token's listing does not show it, PVE knows its id.
    rig.seed_vm(101, "someone-elses", pool=None)
    vms = rig.desired([{"name": f"c-{i}"} for i in range(3)])
    await backend.observe(vms)
    rig.clear_log()
    made = [await backend.create(vm, journal) for vm in vms]
    statuses, asked = _clones(rig)
    assert asked == [100, 101, 102, 103]
    assert statuses[1] != 200 and statuses[:1] + statuses[2:] == [200, 200, 200]
    # The batch's id, then PVE asked again after its refusal (its lowest free: 102).
    assert rig.count("GET", "/cluster/nextid") == 2
    assert [m.identity for m in made] == ["100", "102", "103"]
    other = rig.vm(101)
    assert other is not None and other.name == "someone-elses"
    assert journal.pending() == []


@pytest.mark.parametrize("profile", PROFILES)
async def test_two_appliers_creating_at_once_end_with_every_vm_once(
    rig: FakePveRig, journal: Journal, profile: int
) -> None:
    """Another process counts from the same first id: PVE refuses the later clone of each
    id, which moves on past both; no VM is lost or made twice."""
    mine, theirs = rig.make_backend("demo"), rig.make_backend("demo")
    try:
        left = rig.desired([{"name": f"a-{i}"} for i in range(6)])
        right = rig.desired([{"name": f"b-{i}"} for i in range(6)])
        await mine.observe(left)
        await theirs.observe(right)
        rig.clear_log()
        await asyncio.gather(
            *(mine.create(vm, journal) for vm in left),
            *(theirs.create(vm, journal) for vm in right),
        )
    finally:
        await mine.close()
        await theirs.close()
    names = sorted(vm.name for vm in rig.vms())
    assert names == sorted(vm.name for vm in left + right)
    statuses, _ = _clones(rig)
    refused = sum(1 for s in statuses if s != 200)
    assert statuses.count(200) == 12
    # One id per applier, and one more only after each refusal.
    assert rig.count("GET", "/cluster/nextid") == 2 + refused
