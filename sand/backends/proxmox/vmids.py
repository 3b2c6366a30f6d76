"""Fresh vmids for this process's clones: one ``/cluster/nextid`` per batch, then counted.

PVE reserves nothing: ``nextid`` answers the lowest id no guest holds at that moment
(pve-manager ``PVE::API2::Cluster`` ``nextid``, from ``datacenter.cfg``'s ``next-id``
range), so clones asking at once could be handed one id, and all but the first were
refused "VM X already exists" and tried again. This process asks once per batch (since
the last observation) and counts up from the answer, stepping past the ids the listing
shows and those it is cloning into: its own clones never meet. PVE's "already exists"
(another client's clone, a guest the token cannot see) is the only retry: then PVE is
asked again and the count goes on from the higher of its answer and the next id.
"""

from __future__ import annotations

from sand.backends.proxmox.context import Ctx


async def take(ctx: Ctx) -> int:
    """The next id for a clone of this process (added to ``ctx.cloning_ids``: the
    caller discards it when its clone is made or refused)."""
    async with ctx.vmid_lock():
        if ctx.next_vmid is None:
            ctx.next_vmid = int(await ctx.client.get("cluster/nextid"))
        seen = {int(r["vmid"]) for r in ctx.last_rows or () if "vmid" in r}
        vmid = ctx.next_vmid
        while vmid in seen or vmid in ctx.cloning_ids:
            vmid += 1
        ctx.next_vmid = vmid + 1
        ctx.cloning_ids.add(vmid)
        return vmid


async def taken(ctx: Ctx, vmid: int) -> None:
    """PVE said VM ``vmid`` already exists: another client took ids this process counted
    on. The next :func:`take` goes on past both its id and PVE's lowest free one."""
    async with ctx.vmid_lock():
        fresh = int(await ctx.client.get("cluster/nextid"))
        ctx.next_vmid = max(fresh, vmid + 1, ctx.next_vmid or 0)
