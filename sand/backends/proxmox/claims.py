"""Claim a warm pool's spare: the spare becomes the new VM in one config write.

The spare is read again (never claimed off a stale observation) and must be this
project's spare of the new VM's pool; then one ``PUT …/config`` writes the new name,
the new VM's marker (its name, a creation time of now, no converged fingerprint: it is
provisioned next, and a run killed before that leaves a VM the next plan
reprovisions) and the tags without the spare's ``sand-spare-<pool>``. PVE applies a
config write whole (its config file is replaced under a lock) and ``digest`` refuses
a write over a config changed since the read: a kill at any point leaves either the
spare or the claimed VM, never both or neither. The write is journalled first (op
``claim``); the replay reads which of the two the VM is (``recover.py``).

Requests per claim (measured on fakepve): the re-read (status and config), the write,
and the read of the VM as it now is (status and config): five; no clone, no start.
Marking it converged after its provisioning adds two (a read and a write).
"""

from __future__ import annotations

import time
from dataclasses import replace

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.lifecycle import fresh_for
from sand.desired import DesiredVM
from sand.observed import ObservedVM
from sand.state.journal import Journal, never

OP = "claim"


async def claim(ctx: Ctx, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM:
    fresh, config, node = await fresh_for(ctx, spare, None, "claim")
    assert fresh.marker is not None
    if not vm.pool or fresh.marker.pool != vm.pool:
        raise ProxmoxError(
            ctx.name,
            f"refusing to claim VM {fresh.identity} ({fresh.name}) for {vm.name}: it is not a "
            f"spare of pool {vm.pool!r}",
        )
    vmid = fresh.identity
    marker = replace(
        fresh.marker,
        name=vm.name,
        fingerprint="",
        guest_fingerprint="",
        image=vm.image,
        secrets="",
        secrets_at=0,
        created_at=int(time.time()),  # what an expires: duration counts from
        pool="",
    )
    with journal.operation(
        OP,
        backend=ctx.name,
        vm=vm.name,
        identity=vmid,
        node=node,
        spare=fresh.name,
        pool=vm.pool,
        incarnation=fresh.marker.incarnation,
        failed_when=never,
    ):
        await ctx.client.put(
            f"{vmops.vm_path(node, vmid)}/config",
            name=vm.name,
            tags=mk.merge_tags(config.get("tags"), marker),
            description=desc.merge_description(config.get("description"), marker),
            digest=config.get("digest"),
        )
    observed, _ = await vmops.read_vm(ctx, node, vmid, vm, pool=fresh.details.get("pool"))
    return observed


def claim_outcome(entry_vm: str, spare: str, vmid: str, named: str) -> str:
    """What an interrupted claim left, from the name the VM's marker holds now."""
    if named == entry_vm:
        return f"the claim of spare {spare} landed: VM {vmid} is {entry_vm}"
    return f"the claim of spare {spare} by {entry_vm} did not land: VM {vmid} is still a spare"
