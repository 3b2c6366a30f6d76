"""What a create costs on Proxmox, request by request (fakepve's request log).

A fresh clone asks PVE nothing sand already knows: no listing per VM (the
observation's serves, unless it shows a VM this entry might adopt), no config read
after its own write, no status read of a VM it just cloned stopped, no read-back of
the VM it returns. What stays: the id, the clone and its task, one config read and
one write, the check for a parallel run's duplicate (one listing, shared by the
checks of clones that end together), the resize and the start with their tasks."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from sand.backends.proxmox import vmops
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

PER_VM = {
    "GET /cluster/nextid": 1,
    "POST /nodes/pve1/qemu/{id}/clone": 1,
    "GET /nodes/pve1/qemu/{id}/config": 1,
    "PUT /nodes/pve1/qemu/{id}/config": 1,
    "PUT /nodes/pve1/qemu/{id}/resize": 1,
    "POST /nodes/pve1/qemu/{id}/status/start": 1,
    "GET /nodes/pve1/tasks/{upid}/status": 3,  # clone, resize, start: ended at once
}


def _endpoint(method: str, path: str) -> str:
    path = re.sub(r"/qemu/\d+", "/qemu/{id}", path)
    return f"{method} {re.sub(r'/tasks/[^/]+', '/tasks/{upid}', path)}"


@pytest.mark.parametrize("n", [1, 10])
async def test_a_cold_create_costs_these_requests_per_vm_at_any_n(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, n: int
) -> None:
    vms = rig.desired([{"name": f"c-{i}"} for i in range(n)])
    await backend.observe(vms)  # as apply does: the plan's observation comes first
    rig.clear_log()
    made = await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    spent = Counter(_endpoint(r.method, r.path) for r in rig.log)
    # Duplicate checks asked while a listing is under way share the next one.
    listings = spent.pop("GET /cluster/resources")
    assert 1 <= listings <= max(1, n // 2), listings
    assert spent == Counter({k: v * n for k, v in PER_VM.items()})
    assert len(rig.vms()) == n and journal.pending() == []
    # What create returned without reading it back is what PVE holds.
    for vm, observed in zip(vms, made, strict=True):
        read, _ = await vmops.read_vm(
            backend.ctx, str(observed.node), observed.identity, vm, pool=rig.pool
        )
        assert observed == read


async def test_a_create_whose_name_the_observation_shows_lists_afresh_and_adopts(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    first = await backend.create(vm, journal)
    await backend.observe([vm])  # shows dev
    again = await backend.create(vm, journal)
    assert again.identity == first.identity and len(rig.vms()) == 1
    assert rig.count("POST", contains="/clone") == 1
