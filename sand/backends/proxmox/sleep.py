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

import time
from typing import Any

from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import read_config
from sand.desired import DesiredVM
from sand.observed import SUSPENDED, ObservedVM, Ownership, SleepMark
from sand.state.journal import Journal


async def _ours(
    ctx: Ctx, current: ObservedVM, action: str
) -> tuple[ObservedVM, str, dict[str, Any]]:
    """The VM read again now (and its config), refused unless it is the managed VM that
    was observed."""
    node = current.node or ""
    fresh, config = await vmops.read_vm(
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
    if fresh.lock and not fresh.hibernated:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is locked ({fresh.lock})")
    return fresh, node, config


async def _mark(
    ctx: Ctx, node: str, vmid: str, config: dict[str, Any], mark: SleepMark | None
) -> None:
    """Set (or take off) the sleep mark among the VM's tags, where every host's listing
    reads it. A mark is a claim that the VM went to sleep, and a crash must not leave
    one a later stop would make true-looking: a stop's mark is written after the
    shutdown and taken off before the start. A hibernation's is written before the
    suspend and taken off after the resume (PVE refuses any config write while the
    VM holds its ``suspended`` lock); it counts only beside that lock, which nothing
    but a hibernation sets, so one a crash left behind misleads nobody."""
    tags = mk.asleep_tags(config.get("tags"), mark)
    if tags != mk.join_tags(mk.split_tags(config.get("tags"))):
        await ctx.client.put(
            f"{vmops.vm_path(node, vmid)}/config", tags=tags, digest=config.get("digest")
        )


async def sleep(ctx: Ctx, current: ObservedVM, how: str, journal: Journal, by: str) -> None:
    fresh, node, config = await _ours(ctx, current, "put to sleep")
    if fresh.power != "running" or fresh.lock:
        return  # asleep or stopped already: nothing to do
    vmid = fresh.identity
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=vmid, to=how
    ) as entry:
        mark = SleepMark(how, int(time.time()), by)
        if how == SUSPENDED:
            await _mark(ctx, node, vmid, config, mark)
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
            await _mark(ctx, node, vmid, await read_config(ctx, node, vmid), mark)
        journal.step(entry, how)


async def wake(ctx: Ctx, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
    fresh, node, config = await _ours(ctx, current, "wake")
    if fresh.power == "running":
        return
    vmid = fresh.identity
    with journal.operation(
        "power", backend=ctx.name, vm=current.name, identity=vmid, to="running"
    ) as entry:
        if fresh.hibernated:
            await ctx.client.task(
                "POST",
                f"{vmops.vm_path(node, vmid)}/status/resume",
                None,
                what=f"resume of VM {vmid}",
                timeout=ctx.timeouts.hibernate,
                on_upid=lambda upid: journal.task(entry, upid),
            )
            journal.step(entry, "running")
            if fresh.slept is not None:
                config = await read_config(ctx, node, vmid)  # the resume rewrote it
                await _mark(ctx, node, vmid, config, None)
        else:
            if fresh.slept is not None:
                await _mark(ctx, node, vmid, config, None)
            await vmops.start(ctx, node, vmid, track=lambda upid: journal.task(entry, upid))
            journal.step(entry, "running")
