"""How sand watches a PVE task at its default poll policy (fakepve's request log, with
real task time): one look at once, the next half a second later, then one a second.
Never two looks back to back (the second look used to go out at once, wasted), and no
pause longer than a second (a clone seen late holds its clone slot)."""

from __future__ import annotations

import itertools

import pytest

from sand.backends.proxmox import vmops
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


@pytest.mark.real_clock  # the product poll cadence
@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_a_running_task_is_looked_at_once_then_each_half_second_then_second(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    made = await backend.create(rig.desired([{"name": "p"}])[0], journal)
    await vmops.stop(backend.ctx, str(made.node), made.identity)
    rig.set_task_secs("qmstart", 2.2)
    product = rig.make_backend(fast=False)  # the product's own poll policy
    try:
        rig.clear_log()
        await vmops.start(product.ctx, str(made.node), made.identity)
    finally:
        await product.close()
    looks = [r.at for r in rig.requests("GET", contains="/tasks/") if r.path.endswith("/status")]
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert len(looks) >= 3, looks
    assert gaps[0] >= 0.45, gaps  # the second look half a second after the first
    assert all(g >= 0.95 for g in gaps[1:]), gaps  # then at most one a second
    assert len(looks) <= 5, gaps  # a 2.2 s task: at 0, 0.5, 1.5, 2.5 s (one spare)
