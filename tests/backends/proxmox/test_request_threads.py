"""A wave of creates keeps a request of each VM in flight at once: the Proxmox client
runs its blocking requests in threads of its own, not in the event loop's default pool
(min(32, CPUs + 4): 6 on a 2-core host, which held 10 creates to 6 requests at a time).
Read off fakepve's request log: when each request arrived and was answered."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from sand.state.journal import Journal
from tests.fakepve_rig.pve import Request
from tests.fakepve_rig.rig import FakePveRig


def most_in_flight(log: list[Request]) -> int:
    edges = sorted(e for r in log for e in ((r.at - r.took, 1), (r.at, -1)))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_ten_creates_have_ten_requests_in_flight_whatever_the_default_pool(
    rig: FakePveRig, journal: Journal
) -> None:
    # The default pool is made tiny: the creates must not depend on it.
    small = ThreadPoolExecutor(2)
    asyncio.get_running_loop().set_default_executor(small)
    rig.set_task_secs("qmclone", 0.1)
    rig.set_task_secs("qmstart", 0.1)
    vms = rig.desired([{"name": f"w-{i}", "disk": "4GiB"} for i in range(10)])
    backend = rig.make_backend(clone_parallelism=10)
    rig.pve.network["latency"] = 0.3  # a PVE far away: each request lasts
    rig.clear_log()
    try:
        await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    finally:
        rig.pve.network["latency"] = 0.0
        await backend.close()
    assert len(rig.vms()) == 10
    assert most_in_flight(rig.log) >= 8  # 10 creates, one request each at a time
