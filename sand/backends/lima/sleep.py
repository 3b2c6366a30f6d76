"""Idle VMs put to sleep and woken on Lima (``idle:``, ``sand sleep``, ``sand wake``).

Lima has no suspend: an idle instance sleeps by ``limactl stop`` (its processes and
tmux sessions end; its disk, the agents' conversations with it, stays) and wakes by
``limactl start``. Only the instance sand observed is touched: the one it re-reads now,
managed, of the same incarnation.
"""

from __future__ import annotations

import json
import time

from sand.backends.lima import observe, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.desired import DesiredVM
from sand.errors import BackendError
from sand.observed import ObservedVM
from sand.state.journal import Journal


async def _ours(ctx: Ctx, current: ObservedVM, action: str) -> ObservedVM:
    vmops.require_managed(ctx, current, action)
    fresh = await observe.observe_one(ctx, current.identity)
    vmops.require_managed(ctx, fresh, action)
    seen, now = current.details.get("uid", ""), fresh.details.get("uid", "")
    if seen and now != seen:
        raise BackendError(
            f"refusing to {action} {current.name}: it is not the instance that was observed",
            backend=ctx.name,
        )
    return fresh


async def sleep(ctx: Ctx, current: ObservedVM, how: str, journal: Journal, by: str) -> None:
    fresh = await _ours(ctx, current, "put to sleep")
    if fresh.power != "running":
        return
    name = fresh.identity
    uid = fresh.details.get("uid", "")
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=name, to=how, uid=uid
    ) as entry:
        # The stop first, then the mark (beside sand's marker, where every host's
        # listing reads it): a mark is a claim that the instance went to sleep, so it
        # is written only once it has. A crash between leaves a stopped instance with
        # no mark, read as stopped (the next apply starts it); a mark before the stop
        # would outlive a crash on a running instance and make any later stop, by
        # hand or by an update, read as "asleep".
        await vmops.stop(ctx, name)
        journal.step(entry, "stopped")
        mark = {"how": how, "since": int(time.time()), "by": by}
        await vmops.write_sidecar(ctx, name, scripts.ASLEEP_FILE, json.dumps(mark).encode())


async def wake(ctx: Ctx, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
    fresh = await _ours(ctx, current, "wake")
    if fresh.power == "running":
        return
    name = fresh.identity
    uid = fresh.details.get("uid", "")
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=name, to="running", uid=uid
    ) as entry:
        # The mark off first: a wake killed during ``limactl start`` (which runs on in
        # its own session) must not leave the instance claimed asleep, or its next
        # stop would read as a sleep. Killed before the start, it reads as stopped.
        await vmops.write_sidecar(ctx, name, scripts.ASLEEP_FILE, b"{}")
        await vmops.start(ctx, name)
        journal.step(entry, "started")
