"""Update, delete, mark converged and crash recovery of sand's VMs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sand.backends.protocol import Marker, ObservedVM, Ownership, SecretsRecord
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import is_protected, read_config
from sand.desired import DesiredVM
from sand.state.journal import Journal

UPDATABLE = ("cpus", "memory", "disk", "state", "protect")


def _refuse(ctx: Ctx, current: ObservedVM, action: str) -> None:
    what = f"VM {current.identity} ({current.name})"
    if current.ownership is not Ownership.MANAGED:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is {current.ownership}")
    if current.template:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is a template")
    if current.lock:
        raise ProxmoxError(
            ctx.name, f"refusing to {action} {what}: it is locked ({current.lock})", transient=True
        )


async def _fresh(
    ctx: Ctx, current: ObservedVM, want: DesiredVM | None, action: str
) -> tuple[ObservedVM, dict[str, Any], str]:
    """Re-read the VM (never act on a stale observation) and check it may be changed."""
    _refuse(ctx, current, action)
    node = current.node or ""
    try:
        fresh, config = await vmops.read_vm(ctx, node, current.identity, want)
    except ProxmoxError as e:
        if "does not exist" not in e.detail:
            raise
        row = await vmops.locate(ctx, current.identity)  # moved to another node?
        if row is None:
            raise
        node = str(row.get("node"))
        fresh, config = await vmops.read_vm(ctx, node, current.identity, want)
    _refuse(ctx, fresh, action)
    if fresh.marker is None or fresh.marker.project != ctx.project:
        raise ProxmoxError(ctx.name, f"refusing to {action} VM {current.identity}: not ours")
    return fresh, config, node


def _protected_by_sand(config: Mapping[str, Any]) -> bool:
    block = mk.parse_block(config.get("description"))
    return bool(block and block.get("protect") is True)


async def update(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, fields: Sequence[str], journal: Journal
) -> ObservedVM:
    unknown = sorted(set(fields) - set(UPDATABLE))
    if unknown:
        raise ProxmoxError(ctx.name, f"cannot change {', '.join(unknown)} in place")
    fresh, config, node = await _fresh(ctx, current, vm, "change")
    vmid = fresh.identity
    if is_protected(config) and not (vm.protect or _protected_by_sand(config)):
        raise ProxmoxError(
            ctx.name,
            f"refusing to change VM {vmid} ({vm.name}): protection was set outside sand; "
            "set protect: true in the manifest to manage it, or clear protection in PVE",
        )
    path = vmops.vm_path(node, vmid)
    entry = journal.begin(
        "update", backend=ctx.name, vm=vm.name, identity=vmid, node=node, fields=list(fields)
    )
    was_running = fresh.power == "running"
    want_running = vm.state == "running" if "state" in fields else was_running
    params: dict[str, Any] = {}
    if "cpus" in fields:
        params.update(cores=vm.cpus, sockets=1)
    if "memory" in fields:
        params["memory"] = mk.memory_mib(vm.memory)
    if "protect" in fields:
        params["protection"] = 1 if vm.protect else 0
        params["description"] = _description(config, fresh.marker, protect=vm.protect)
    running = was_running
    if running and ({"cpus", "memory"} & set(fields)):
        # CPU and memory need a restart: change them on a stopped VM, so nothing is left
        # pending (PVE keeps changes to a running VM pending until its next start).
        await vmops.shutdown(ctx, node, vmid)
        running = False
        journal.step(entry, "stopped")
    if params:
        await ctx.client.put(f"{path}/config", **params)
        journal.step(entry, "configured")
    if "disk" in fields:
        disk = vmops.boot_disk(config)
        if disk is None:
            raise ProxmoxError(ctx.name, f"VM {vmid} has no disk to resize")
        if vm.disk < disk[1]:
            raise ProxmoxError(
                ctx.name, f"VM {vmid} disk {disk[0]} is {disk[1]} bytes; PVE cannot shrink disks"
            )
        if vm.disk > disk[1]:
            await vmops.resize(ctx, node, vmid, disk[0], vm.disk)
            journal.step(entry, "resized")
    if want_running and not running:
        await vmops.start(ctx, node, vmid)
        journal.step(entry, "started")
    elif running and not want_running:
        await vmops.shutdown(ctx, node, vmid)
        journal.step(entry, "stopped")
    journal.finish(entry)
    observed, _ = await vmops.read_vm(ctx, node, vmid, vm)
    return observed


def _description(config: Mapping[str, Any], marker: Marker | None, **extra: object) -> str:
    block = mk.parse_block(config.get("description")) or {}
    keep = {k: v for k, v in block.items() if k in ("protect",)}
    keep.update(extra)
    assert marker is not None
    return mk.merge_description(config.get("description"), marker, **keep)


async def delete(ctx: Ctx, current: ObservedVM, journal: Journal) -> None:
    fresh, config, node = await _fresh(ctx, current, None, "delete")
    vmid = fresh.identity
    if is_protected(config):
        raise ProxmoxError(
            ctx.name,
            f"refusing to delete VM {vmid} ({fresh.name}): protection is set; "
            "set protect: false and apply before removing it",
        )
    entry = journal.begin("delete", backend=ctx.name, vm=fresh.name, identity=vmid, node=node)
    await vmops.destroy(ctx, node, vmid)
    journal.finish(entry)


async def rename(ctx: Ctx, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
    """Give a replacement VM (made under a temporary name) its final name: one config PUT.

    PVE names need not be unique, so this never fails on the old VM's name; sand
    renames only after the old VM is gone, so no listing shows two of a name.
    """
    fresh, config, node = await _fresh(ctx, current, None, "rename")
    vmid = fresh.identity
    assert fresh.marker is not None
    entry = journal.begin(
        "rename", backend=ctx.name, vm=name, identity=vmid, node=node, old_name=fresh.name
    )
    marker = dataclasses.replace(fresh.marker, name=name)
    await ctx.client.put(
        f"{vmops.vm_path(node, vmid)}/config",
        name=name,
        description=_description(config, marker),
        digest=config.get("digest"),
    )
    journal.finish(entry)
    observed, _ = await vmops.read_vm(ctx, node, vmid, None)
    return observed


async def mark_converged(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
) -> None:
    """Write the desired fingerprints into tags and description, operator text kept.

    The secrets tag is what ``secrets`` says was delivered, or, when nothing was
    delivered this run, the one the VM carries now."""
    _refuse(ctx, current, "mark")
    node = current.node or ""
    path = vmops.vm_path(node, current.identity)
    for attempt in range(3):
        config = await read_config(ctx, node, current.identity)
        found = mk.parse_tags(config.get("tags"))
        stamp, stamped_at = (
            (secrets.stamp, secrets.delivered_at)
            if secrets is not None
            else (found.secrets, found.secrets_at)
        )
        marker = Marker(
            ctx.project,
            vm.name,
            current.identity,
            vm.fingerprint,
            vm.guest_fingerprint,
            vm.image,
            secrets=stamp,
            secrets_at=stamped_at if stamp else 0,
        )
        described = mk.parse_description(config.get("description"))
        claims = [(found.project, found.identity)] if found.complete else []
        if described is not None:
            claims.append((described.project, described.identity))
        if not claims or any(c != (ctx.project, current.identity) for c in claims):
            raise ProxmoxError(ctx.name, f"refusing to mark VM {current.identity}: not ours")
        try:
            await ctx.client.put(
                f"{path}/config",
                tags=mk.merge_tags(config.get("tags"), marker),
                description=mk.merge_description(
                    config.get("description"), marker, protect=vm.protect
                ),
                digest=config.get("digest"),
            )
            return
        except ProxmoxError as e:
            # Someone edited the config between the read and the write: read again.
            retry = "checksum mismatch" in e.detail or "modified" in e.detail
            if not retry or attempt == 2:
                raise


async def recover(ctx: Ctx, entry: Mapping[str, Any], journal: Journal) -> str:
    """Settle one unfinished journal entry of a crashed run; a one-line account."""
    op, vmid, name = str(entry.get("op")), str(entry.get("identity")), str(entry.get("vm"))
    entry_id = str(entry.get("id"))
    steps = list(entry.get("steps") or [])
    row = await vmops.find_or_wait(ctx, vmid)
    if row is None:
        journal.settle(entry_id, "nothing")
        return f"{op} of {name} (VM {vmid}): VM {vmid} does not exist, nothing to do"
    node = str(row.get("node"))
    if op == "update":
        journal.settle(entry_id, "nothing")
        return f"update of {name} (VM {vmid}) was interrupted; the next plan re-applies it"
    if row.get("lock"):
        # The crashed run's task (a clone, a destroy) goes on without it: let it end.
        # Still locked after the wait: raise, so the entry stays open for the next run.
        await vmops.wait_unlocked(
            ctx, node, vmid, why=f"the interrupted {op} of {name} is settled on the next run"
        )
    config = await read_config(ctx, node, vmid)
    tags = mk.parse_tags(config.get("tags"))
    block = mk.parse_block(config.get("description")) or {}
    described = mk.parse_description(config.get("description"))
    tagged = tags.complete and tags.project == ctx.project and tags.identity == vmid
    ours_by_description = (
        described is not None
        and described.project == ctx.project
        and described.identity == vmid
        and described.name == name
    )
    if op == "create":
        made_here = block.get("op") == entry_id or (
            "cloned" in steps and (ours_by_description or row.get("name") == name)
        )
        adopting = bool(entry.get("adopt"))
        if tagged and (ours_by_description or made_here or adopting):
            journal.settle(entry_id, "adopted")
            return (
                f"create of {name} (VM {vmid}) was interrupted after configuration; adopted "
                "(the next plan finishes it)"
            )
        if made_here and not adopting:
            if is_protected(config):
                journal.settle(entry_id, "left")
                return f"create of {name} (VM {vmid}) half-made but protected; left alone"
            await vmops.destroy(ctx, node, vmid)
            journal.settle(entry_id, "deleted")
            return f"create of {name} (VM {vmid}) was interrupted before configuration; deleted"
        journal.settle(entry_id, "nothing")
        return f"create of {name}: VM {vmid} is not one this run made; left alone"
    if op == "delete":
        if (tagged or ours_by_description) and not is_protected(config) and not row.get("template"):
            await vmops.destroy(ctx, node, vmid)
            journal.settle(entry_id, "deleted")
            return f"delete of {name} (VM {vmid}) was interrupted; finished it"
        journal.settle(entry_id, "nothing")
        return f"delete of {name} (VM {vmid}): no longer ours to delete; left alone"
    journal.settle(entry_id, "nothing")
    return f"{op} of {name} (VM {vmid}): nothing to do"
