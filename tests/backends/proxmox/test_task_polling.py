"""How sand watches a PVE task at its default poll policy, read from fakepve's request
log on a fake clock (the schedule is the subject, not the seconds): one look at once,
the next half a second later, then one a second. Never two looks back to back (the
second look used to go out at once, wasted), and a task's end is seen within a second
of it, half a second on average (a clone seen late holds its clone slot)."""

from __future__ import annotations

import asyncio
import math

import pytest

from sand.backends.proxmox import vmops
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


class TaskClock:
    """A clock whose sleeps pass at once. When its time reaches ``ends_at`` every PVE
    task under way ends (fakepve fast-forwards) before the sleep returns. Each sleep
    notes the time it began and how many status looks fakepve had answered by then."""

    def __init__(self, rig: FakePveRig, ends_at: float) -> None:
        self.rig, self.ends_at = rig, ends_at
        self.now = 0.0
        self.sleeps: list[tuple[float, float, int]] = []  # (began, secs, looks so far)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, secs: float) -> None:
        self.sleeps.append((self.now, secs, len(status_looks(self.rig))))
        ended_before = self.now >= self.ends_at
        self.now += secs
        if self.now >= self.ends_at and not ended_before:
            self.rig.fast_forward()
            while not self.rig.run(
                lambda: all(t["status"] == "stopped" for t in self.rig.pve.tasks.values())
            ):
                await asyncio.sleep(0.001)  # the server's loop finishing the task


def status_looks(rig: FakePveRig) -> list[object]:
    return [r for r in rig.requests("GET", contains="/tasks/") if r.path.endswith("/status")]


@pytest.mark.parametrize("ends_at", [0.2, 0.7, 2.2, 9.6])
@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_a_task_is_looked_at_at_once_then_half_a_second_later_then_each_second(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, ends_at: float
) -> None:
    made = await backend.create(rig.desired([{"name": "p"}])[0], journal)
    await vmops.stop(backend.ctx, str(made.node), made.identity)
    rig.set_task_secs("qmstart", 3600)  # runs until the fake clock passes ends_at
    product = rig.make_backend(fast=False)  # the product's own poll policy
    clock = TaskClock(rig, ends_at)
    product.ctx.client.monotonic = clock.monotonic
    product.ctx.client.sleep = clock.sleep
    try:
        rig.clear_log()
        await vmops.start(product.ctx, str(made.node), made.identity)
    finally:
        await product.close()
    assert rig.vm(int(made.identity)).status == "running"  # type: ignore[union-attr]
    looks = len(status_looks(rig))
    # Every pause follows exactly one look: no two looks back to back.
    assert [n for _at, _secs, n in clock.sleeps] == list(range(1, looks)), clock.sleeps
    assert [secs for _at, secs, _n in clock.sleeps] == [0.5] + [1.0] * (looks - 2)
    seen_at = clock.now  # the last look, the one that saw the task stopped
    assert ends_at <= seen_at <= ends_at + 1.0, (ends_at, seen_at)
    # At most one look a second past the first half second (the look at once included).
    assert looks == 2 + max(0, math.ceil(ends_at - 0.5)), (looks, clock.sleeps)
