"""How many clones a backend runs at once when the manifest names no number: chosen by
the storage its clones go to (10 on local storage, 2 on shared; docs/backends/proxmox.md
says why), and the manifest's ``clone_parallelism`` over either. Counted on fakepve: the
clones it holds under way (each ``lock: clone``) while no clone may end."""

from __future__ import annotations

import asyncio

import pytest

from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

VMS = 12


async def _clones_at_once(rig: FakePveRig, journal: Journal, **overrides: object) -> int:
    """Start VMS creates whose clones cannot end, read how many fakepve holds under way
    once no more arrive, then let them all end."""
    rig.set_task_secs("qmclone", 3600)  # ends only when fast-forwarded
    backend = rig.make_backend(**overrides)
    desired = rig.desired([{"name": f"dev-{i}"} for i in range(VMS)])
    creates = asyncio.gather(*(backend.create(vm, journal) for vm in desired))

    def cloning() -> int:
        return rig.run(lambda: sum(1 for v in rig.pve.vms if v.lock == "clone"))

    # Under way = as many as the slots let through; a create waiting for a slot sends
    # nothing, so the count stops growing at the limit (or at VMS with no limit at all).
    seen, still = 0, 0
    while still < 50:
        await asyncio.sleep(0.01)
        now = cloning()
        seen, still = now, (still + 1 if now == seen and now else 0)
    posted = rig.count("POST", contains="/clone")
    rig.set_task_secs("qmclone", 0)
    rig.fast_forward()
    await creates
    await backend.close()
    assert len(rig.vms()) == VMS
    assert posted == seen  # no clone was refused or retried meanwhile
    return seen


@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_ten_clones_at_once_onto_local_storage(rig: FakePveRig, journal: Journal) -> None:
    assert await _clones_at_once(rig, journal) == 10


@pytest.mark.fakepve_rig(time_scale=1.0, shared_storage=True)
async def test_two_clones_at_once_onto_shared_storage(rig: FakePveRig, journal: Journal) -> None:
    assert await _clones_at_once(rig, journal) == 2


@pytest.mark.fakepve_rig(time_scale=1.0, shared_storage=True)
async def test_the_manifests_clone_parallelism_wins(rig: FakePveRig, journal: Journal) -> None:
    assert await _clones_at_once(rig, journal, clone_parallelism=5) == 5
