"""Idle VMs put to sleep and woken on Proxmox (``idle:``, ``sand sleep``, ``sand wake``).

"suspended" is PVE's suspend to disk (``POST status/suspend todisk=1``): qemu-server
saves the VM's RAM and device state to a state volume (``vmstate`` in its config), stops
QEMU and leaves the config locked ``suspended``; a resume (``POST status/resume``) of
such a VM starts it from that state (``PVE::API2::Qemu`` ``vm_resume`` ->
``vm_start``), so processes, tmux sessions and an agent's open question come back as
they were. The state volume is written to the backend's ``storage`` (the VM's own
disks' storage, which preflight checks is active and has room for the RAM). "stopped"
is the ACPI shutdown every update uses.
"""

from __future__ import annotations

from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.desired import DesiredVM
from sand.observed import ObservedVM, Ownership
from sand.state.journal import Journal

SUSPENDED = "suspended"  # sand.plan.idle's word, and PVE's lock while hibernated


async def _ours(ctx: Ctx, current: ObservedVM, action: str) -> tuple[ObservedVM, str]:
    """The VM read again now, refused unless it is the managed VM that was observed."""
    node = current.node or ""
    fresh, _config = await vmops.read_vm(
        ctx, node, current.identity, None, pool=current.details.get("pool")
    )
    what = f"VM {current.identity} ({current.name})"
    if fresh.ownership is not Ownership.MANAGED or fresh.marker is None or fresh.template:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is {fresh.ownership}")
    seen = current.marker.incarnation if current.marker else ""
    if seen and fresh.marker.incarnation != seen:
        raise ProxmoxError(
            ctx.name, f"refusing to {action} {what}: it is not the VM that was observed"
        )
    if fresh.lock and fresh.lock != SUSPENDED:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is locked ({fresh.lock})")
    return fresh, node


async def sleep(ctx: Ctx, current: ObservedVM, how: str, journal: Journal) -> None:
    fresh, node = await _ours(ctx, current, "put to sleep")
    if fresh.power != "running" or fresh.lock:
        return  # asleep or stopped already: nothing to do
    vmid = fresh.identity
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=vmid, to=how
    ) as entry:
        if how == SUSPENDED:
            await ctx.client.task(
                "POST",
                f"{vmops.vm_path(node, vmid)}/status/suspend",
                {"todisk": 1, "statestorage": ctx.config.storage},
                what=f"hibernation of VM {vmid}",
                timeout=ctx.timeouts.hibernate,
                on_upid=lambda upid: journal.task(entry, upid),
            )
        else:
            await vmops.shutdown(ctx, node, vmid, track=lambda upid: journal.task(entry, upid))
        journal.step(entry, how)


async def wake(ctx: Ctx, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
    fresh, node = await _ours(ctx, current, "wake")
    if fresh.power == "running":
        return
    vmid = fresh.identity
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=vmid, to="running"
    ) as entry:
        if fresh.lock == SUSPENDED:
            await ctx.client.task(
                "POST",
                f"{vmops.vm_path(node, vmid)}/status/resume",
                None,
                what=f"resume of VM {vmid}",
                timeout=ctx.timeouts.hibernate,
                on_upid=lambda upid: journal.task(entry, upid),
            )
        else:
            await vmops.start(ctx, node, vmid, track=lambda upid: journal.task(entry, upid))
        journal.step(entry, "running")
