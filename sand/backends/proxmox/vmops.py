"""Operations on one VM shared by create, update, delete and recover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sand import activity
from sand.backends.proxmox import units
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import _observed, classify, listing, read_config
from sand.desired import DesiredVM
from sand.observed import ObservedVM, Ownership

DRIVE_PREFIXES = ("scsi", "virtio", "sata", "ide")
Track = Callable[[str], None]  # hears the UPID of each task started (the journal records it)


def vm_path(node: str, vmid: str | int) -> str:
    return f"nodes/{node}/qemu/{vmid}"


async def read_status(ctx: Ctx, node: str, vmid: str | int) -> dict[str, Any]:
    return dict(await ctx.client.get(f"{vm_path(node, vmid)}/status/current") or {})


async def read_vm(
    ctx: Ctx,
    node: str,
    vmid: str | int,
    want: DesiredVM | None = None,
    *,
    pool: str | None,
) -> tuple[ObservedVM, dict[str, Any]]:
    """A deep read of one VM (status and config): its ObservedVM and config.

    Neither call shows the VM's pool, so the caller says where it was seen (the
    listing row it came from): a VM not seen in this backend's pool is never managed."""
    status = await read_status(ctx, node, vmid)
    config = await read_config(ctx, node, vmid)
    row = row_of(node, vmid, status, config)
    if pool:
        row["pool"] = pool
    desired = {want.name: want} if want else {}
    observed = classify(ctx, row, desired, config)
    if not isinstance(observed, ObservedVM):
        observed = _observed(ctx, row, Ownership.UNMANAGED, None, None, deep=True)
    return observed, config


def row_of(
    node: str, vmid: str | int, status: Mapping[str, Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """A listing-shaped row from status/current and config."""
    return {
        "vmid": int(vmid),
        "name": status.get("name") or config.get("name"),
        "node": node,
        "status": status.get("status"),
        "maxcpu": status.get("cpus") or status.get("maxcpu"),
        "maxmem": status.get("maxmem"),
        "maxdisk": status.get("maxdisk"),
        "tags": config.get("tags") or status.get("tags"),
        "lock": status.get("lock") or config.get("lock"),
        "template": status.get("template") or config.get("template"),
    }


async def locate(ctx: Ctx, vmid: str | int) -> dict[str, Any] | None:
    """The VM's listing row (it may have moved node), or None if it is gone."""
    for row in await listing(ctx):
        if str(row["vmid"]) == str(vmid):
            return dict(row)
    return None


async def id_taken(ctx: Ctx, vmid: str | int) -> bool:
    """Whether any guest holds vmid, seen or not (``/cluster/nextid?vmid=`` needs no rights)."""
    try:
        await ctx.client.get("cluster/nextid", vmid=vmid)
    except ProxmoxError as e:
        if e.kind is ErrorKind.EXISTS:
            return True
        raise
    return False


async def find_or_wait(ctx: Ctx, vmid: str | int) -> dict[str, Any] | None:
    """The VM's listing row, or None when the id is free.

    A clone in flight is not yet in the pool, so a pool-scoped token cannot see it
    though its id is taken: wait (bounded) for it to join the pool or to go away.
    """
    deadline = time.monotonic() + ctx.timeouts.unlock
    delay, cap = ctx.unlock_poll
    while True:
        row = await locate(ctx, vmid)
        if row is not None:
            return row
        if not await id_taken(ctx, vmid):
            return None
        if time.monotonic() + delay > deadline:
            raise ProxmoxError(
                ctx.name,
                f"VM {vmid} exists but is not visible to the token after "
                f"{ctx.timeouts.unlock:.0f}s (a clone still running, or a VM outside pool "
                f"{ctx.config.pool!r})",
                transient=True,
                kind=ErrorKind.TIMEOUT,
            )
        await asyncio.sleep(delay)
        delay = min(cap, delay * 2)


async def wait_unlocked(ctx: Ctx, node: str, vmid: str | int, *, why: str) -> dict[str, Any]:
    """Wait (bounded) for another task's lock on the VM to clear; returns its config."""
    deadline = time.monotonic() + ctx.timeouts.unlock
    delay, cap = ctx.unlock_poll
    said = False
    while True:
        status = await read_status(ctx, node, vmid)
        lock = status.get("lock")
        if not lock:
            return await read_config(ctx, node, vmid)
        if not said:
            activity.step(f"waiting for VM {vmid}'s {lock} lock", limit=ctx.timeouts.unlock)
            said = True
        if time.monotonic() + delay > deadline:
            raise ProxmoxError(
                ctx.name,
                f"VM {vmid} is still locked ({lock}) after {ctx.timeouts.unlock:.0f}s; {why}",
                transient=True,
                kind=ErrorKind.LOCKED,
            )
        await asyncio.sleep(delay)
        delay = min(cap, delay * 2)


async def _power(
    ctx: Ctx,
    node: str,
    vmid: str | int,
    action: str,
    *,
    timeout: float,
    already: ErrorKind,
    params: dict[str, Any] | None = None,
    track: Track | None = None,
) -> None:
    """POST status/<action> and wait for its task; the VM already being there (PVE's
    answer of kind ``already``) is fine."""
    try:
        await ctx.client.task(
            "POST",
            f"{vm_path(node, vmid)}/status/{action}",
            params,
            what=f"{action} of VM {vmid}",
            timeout=timeout,
            on_upid=track,
        )
    except ProxmoxError as e:
        if e.kind is not already:
            raise


async def start(ctx: Ctx, node: str, vmid: str | int, *, track: Track | None = None) -> None:
    await _power(
        ctx,
        node,
        vmid,
        "start",
        timeout=ctx.timeouts.start,
        already=ErrorKind.ALREADY_RUNNING,
        track=track,
    )


async def stop(ctx: Ctx, node: str, vmid: str | int, *, track: Track | None = None) -> None:
    """Hard stop (disposable VMs being removed)."""
    await _power(
        ctx,
        node,
        vmid,
        "stop",
        timeout=ctx.timeouts.stop,
        already=ErrorKind.NOT_RUNNING,
        track=track,
    )


async def shutdown(ctx: Ctx, node: str, vmid: str | int, *, track: Track | None = None) -> None:
    """ACPI shutdown, forced off when the guest does not power down in time."""
    await _power(
        ctx,
        node,
        vmid,
        "shutdown",
        timeout=ctx.timeouts.shutdown + 60,
        already=ErrorKind.NOT_RUNNING,
        params={"timeout": int(ctx.timeouts.shutdown), "forceStop": 1},
        track=track,
    )


async def resize(
    ctx: Ctx, node: str, vmid: str | int, disk: str, size: int, *, track: Track | None = None
) -> None:
    """Grow ``disk`` to ``size`` bytes (PVE only grows disks)."""
    await ctx.client.task(
        "PUT",
        f"{vm_path(node, vmid)}/resize",
        {"disk": disk, "size": units.size_arg(size)},
        what=f"resize of VM {vmid} {disk}",
        timeout=ctx.timeouts.resize,
        on_upid=track,
    )


async def destroy(ctx: Ctx, node: str, vmid: str | int, *, track: Track | None = None) -> None:
    """Stop and delete a VM with its disks; a VM already gone is fine."""
    try:
        status = await read_status(ctx, node, vmid)
        if status.get("status") == "running":
            await stop(ctx, node, vmid, track=track)
        await ctx.client.task(
            "DELETE",
            vm_path(node, vmid),
            {"purge": 1, "destroy-unreferenced-disks": 1},
            what=f"delete of VM {vmid}",
            timeout=ctx.timeouts.delete,
            on_upid=track,
        )
    except ProxmoxError as e:
        # A pool-confined token's rights on a VM come from the pool, which the VM left
        # as it was deleted: PVE checks them first and answers 403, not "does not
        # exist". The id being free tells the VM is gone.
        gone = e.kind is ErrorKind.NOT_FOUND
        if not gone and not (e.kind is ErrorKind.FORBIDDEN and not await id_taken(ctx, vmid)):
            raise
    for ip, owner in list(ctx.addresses.items()):
        if owner == str(vmid):
            del ctx.addresses[ip]


async def active_tasks(ctx: Ctx, node: str, vmid: str | int) -> list[str]:
    """UPIDs of tasks still running on the VM (those this token may see: its own)."""
    rows = await ctx.client.get(f"nodes/{node}/tasks", vmid=vmid, source="active")
    return [
        str(r["upid"])
        for r in rows or []
        if isinstance(r, dict)
        and r.get("upid")
        and not r.get("endtime")
        and r.get("status") in (None, "", "running")
    ]


async def await_tasks(
    ctx: Ctx, nodes: Sequence[str], vmid: str | int, upids: Sequence[str], *, why: str
) -> None:
    """Wait (bounded by the unlock timeout) for ``upids`` and any other active task on
    the VM to end, however they end; still running at the deadline: raise (transient)."""
    deadline = time.monotonic() + ctx.timeouts.unlock
    seen: set[str] = set()

    async def wait_for(upid: str) -> None:
        seen.add(upid)
        left = max(0.0, deadline - time.monotonic())
        try:
            await ctx.client.wait(upid, what=f"task {upid} ({why})", timeout=left)
        except ProxmoxError as e:
            if e.kind is ErrorKind.TIMEOUT:
                raise ProxmoxError(
                    ctx.name,
                    f"VM {vmid}: task {upid} is still running after "
                    f"{ctx.timeouts.unlock:.0f}s; {why}",
                    transient=True,
                    kind=ErrorKind.TIMEOUT,
                ) from None
            # The task ended (failed, or its UPID is unknown to PVE): nothing to wait for.

    for upid in upids:
        if upid and upid not in seen:
            await wait_for(upid)
    for node in dict.fromkeys(n for n in nodes if n):
        try:
            active = await active_tasks(ctx, node, vmid)
        except ProxmoxError as e:
            if e.status in (403, 595) or e.kind is ErrorKind.NOT_FOUND:
                continue  # no task view on that node: the recorded UPIDs were awaited
            raise
        for upid in active:
            if upid not in seen:
                await wait_for(upid)


def boot_disk(config: Mapping[str, Any]) -> tuple[str, int] | None:
    """The boot disk's config key and size in bytes (cloud-init and CD-ROM drives skipped)."""
    order: list[str] = []
    boot = str(config.get("boot") or "")
    if boot.startswith("order="):
        order = [d for d in boot[len("order=") :].split(";") if d]
    elif config.get("bootdisk"):
        order = [str(config["bootdisk"])]
    keys = sorted(
        (k for k in config if k.startswith(DRIVE_PREFIXES) and k[-1].isdigit()),
        key=lambda k: (DRIVE_PREFIXES.index(next(p for p in DRIVE_PREFIXES if k.startswith(p))), k),
    )
    for key in [k for k in order if k in config] + keys:
        value = str(config.get(key) or "")
        if not value or "media=cdrom" in value or "cloudinit" in value.split(",")[0]:
            continue
        size = 0
        for part in value.split(",")[1:]:
            if part.startswith("size="):
                size = units.parse_size(part[5:]) or 0
        return key, size
    return None


def has_cloudinit(config: Mapping[str, Any]) -> bool:
    return any(
        k.startswith(DRIVE_PREFIXES) and "cloudinit" in str(v).split(",")[0]
        for k, v in config.items()
    )


def free_ide(config: Mapping[str, Any]) -> str | None:
    for key in ("ide2", "ide0", "ide1", "ide3"):
        if key not in config:
            return key
    return None


def mac_of(net: object) -> str | None:
    """The MAC of a netN value (``virtio=BC:24:11:..,bridge=vmbr0``)."""
    for part in str(net or "").split(","):
        key, _, value = part.partition("=")
        if key == "macaddr" or (value.count(":") == 5 and key not in ("bridge", "tag")):
            return value.lower()
    return None


def with_bridge(net: object, bridge: str) -> str:
    """net0 on ``bridge``, model and MAC kept (a fresh virtio NIC if there is none)."""
    parts = [p for p in str(net or "").split(",") if p]
    if not parts:
        return f"virtio,bridge={bridge}"
    kept = [p for p in parts if not p.startswith("bridge=")]
    return ",".join([kept[0], f"bridge={bridge}", *kept[1:]])


def bridge_of(net: object) -> str | None:
    """The bridge of a netN value, None when it names none."""
    for part in str(net or "").split(","):
        key, _, value = part.partition("=")
        if key == "bridge":
            return value
    return None


def without_mac(net: object) -> str:
    """A netN value with its MAC left out (PVE makes a new one when it is written)."""
    parts = [p for p in str(net or "").split(",") if p]
    kept = [p for p in parts if not p.startswith("macaddr=")]
    if kept:
        model, _, value = kept[0].partition("=")
        if value.count(":") == 5:  # ``virtio=BC:24:11:..``: the model with its MAC
            kept[0] = model
    return ",".join(kept)
