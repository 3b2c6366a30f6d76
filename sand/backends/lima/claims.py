"""Claim a warm pool's spare on Lima: stop, ``limactl rename``, start, marker rewritten.

``limactl rename`` shares Lima's clone code and refuses a running instance, so a claim
on Lima boots the spare once (under its new name); it makes no clone and runs none of
the machine's provisioning. The rename is the backend's own journalled one
(``lifecycle.rename``: a kill at any step leaves the instance under one of its two
names, never both or neither, and the replay finishes the sidecar); the claimed VM's
marker then loses the spare's pool role and names the new VM (one sidecar write: a run
killed before it leaves the new VM marked as its pool's, which its provisioning and the
next marker write settle).
"""

from __future__ import annotations

from sand.backends.lima import lifecycle, observe, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.desired import DesiredVM
from sand.errors import BackendError
from sand.observed import ObservedVM
from sand.state.journal import Journal


async def claim(ctx: Ctx, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM:
    vmops.require_managed(ctx, spare, "claim")
    if not vm.pool or spare.marker is None or spare.marker.pool != vm.pool:
        raise BackendError(
            f"refusing to claim {spare.identity} for {vm.name}: it is not a spare of pool "
            f"{vm.pool!r}",
            backend=ctx.name,
        )
    renamed = await lifecycle.rename(ctx, spare, vm.name, journal)
    data = lifecycle.sidecar(ctx, vm, renamed, protect=False)
    await vmops.write_sidecar(ctx, vm.name, scripts.MARKER_FILE, data)
    return await observe.observe_one(ctx, vm.name)
