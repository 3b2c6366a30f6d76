"""Delete, rename and mark converged of sand's VMs, and what an update checks first (the
update itself: ``update.py``; crash recovery: ``recover.py``)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sand.backends.capabilities import Mutability, fields_with
from sand.backends.proxmox import description as desc
from sand.backends.proxmox import firewall, vmops
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import is_protected, owner, read_config
from sand.desired import DesiredVM
from sand.observed import Marker, ObservedVM, Ownership, SecretsRecord
from sand.state.journal import Journal, JournalEntry, never

# Which fields change in place, need a restart or force replacement: what planning
# reads (``Capabilities``), and what this module's update path follows.
FIELD_POLICY: Mapping[str, Mutability] = {
    "image": Mutability.REPLACE,
    "node": Mutability.REPLACE,
    "cpus": Mutability.RESTART,
    "cpu": Mutability.RESTART,  # the CPU type: QEMU's -cpu is fixed at start
    "memory": Mutability.RESTART,
    "disk": Mutability.GROW_ONLY,
    "state": Mutability.IN_PLACE,
    "protect": Mutability.IN_PLACE,
    # Its PVE firewall (sand.backends.proxmox.firewall), rewritten on a running VM.
    "egress": Mutability.IN_PLACE,
}
# What an update changes: every field that is not replaced.
UPDATABLE = fields_with(FIELD_POLICY, *(m for m in Mutability if m is not Mutability.REPLACE))
# Read by QEMU only when it starts: changed on a stopped VM.
NEEDS_RESTART = frozenset(fields_with(FIELD_POLICY, Mutability.RESTART))


def refuse(ctx: Ctx, current: ObservedVM, action: str) -> None:
    what = f"VM {current.identity} ({current.name})"
    if current.ownership is not Ownership.MANAGED:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is {current.ownership}")
    if current.template:
        raise ProxmoxError(ctx.name, f"refusing to {action} {what}: it is a template")
    if current.lock:
        raise ProxmoxError(
            ctx.name,
            f"refusing to {action} {what}: it is locked ({current.lock})",
            transient=True,
            kind=ErrorKind.LOCKED,
        )


async def fresh_for(
    ctx: Ctx,
    current: ObservedVM,
    want: DesiredVM | None,
    action: str,
    *,
    located: Mapping[str, Any] | None = None,
) -> tuple[ObservedVM, dict[str, Any], str]:
    """Re-read the VM (never act on a stale observation) and check it may be changed.

    ``located``: the VM's listing row read just now (a delete reads where it is first)."""
    refuse(ctx, current, action)
    node = current.node or ""
    # Where the observation saw it: a VM not seen in this backend's pool is never ours.
    pool = current.details.get("pool")
    if located is not None:
        node, pool = str(located.get("node")), located.get("pool")
    try:
        fresh, config = await vmops.read_vm(ctx, node, current.identity, want, pool=pool)
    except ProxmoxError as e:
        if e.kind is not ErrorKind.NOT_FOUND:
            raise
        row = await vmops.locate(ctx, current.identity)  # moved to another node?
        if row is None:
            raise
        node = str(row.get("node"))
        pool = row.get("pool")
        fresh, config = await vmops.read_vm(ctx, node, current.identity, want, pool=pool)
    refuse(ctx, fresh, action)  # managed: the one rule, on what was read just now
    if fresh.marker is None:
        raise ProxmoxError(ctx.name, f"refusing to {action} VM {current.identity}: not ours")
    seen = current.marker.incarnation if current.marker else ""
    if seen and fresh.marker.incarnation != seen:
        raise ProxmoxError(
            ctx.name,
            f"refusing to {action} VM {current.identity}: it is not the VM that was observed "
            "(another one took its id)",
        )
    return fresh, config, node


def tracker(journal: Journal, entry: JournalEntry) -> vmops.Track:
    """Journal each task's UPID as PVE hands it out."""
    return lambda upid: journal.task(entry, upid)


def protected_by_sand(config: Mapping[str, Any]) -> bool:
    block = desc.parse_block(config.get("description"))
    return bool(block and block.get("protect") is True)


def marker_description(
    ctx: Ctx, config: Mapping[str, Any], marker: Marker | None, **extra: object
) -> str:
    block = desc.parse_block(config.get("description")) or {}
    keep = {k: v for k, v in block.items() if k in ("protect", firewall.MARKER_KEY)}
    keep.update(extra)
    assert marker is not None
    return desc.merge_description(config.get("description"), own_marker(ctx, marker, block), **keep)


def own_marker(ctx: Ctx, marker: Marker, block: Mapping[str, Any]) -> Marker:
    """``marker`` as this backend writes it: its name, and the VM's incarnation (a VM an
    older sand made without one gets one now, once) and creation time kept (one an older
    sand made stays without: when it was made is not known)."""
    incarnation = marker.incarnation or str(block.get("op") or "") or uuid.uuid4().hex
    created_at = marker.created_at or desc.created_at_of(block)
    # The base it was cloned from is, like its creation, written once and kept.
    base = marker.base or str(block.get("base") or "")
    return replace(
        marker, backend=ctx.name, incarnation=incarnation, created_at=created_at, base=base
    )


async def delete(ctx: Ctx, current: ObservedVM, journal: Journal) -> None:
    refuse(ctx, current, "delete")
    # Nothing is undone by a delete: where the VM is now is read again (one listing).
    row = await vmops.locate(ctx, current.identity)
    if row is None:
        if not await vmops.id_taken(ctx, current.identity):
            # No guest holds the vmid: the VM is already deleted (by a person, another
            # host, or a delete whose answer was lost). What a delete wants is so.
            return
        raise ProxmoxError(
            ctx.name,
            f"refusing to delete VM {current.identity}: it still exists but has left pool "
            f"{ctx.config.pool!r} (this backend no longer sees it)",
        )
    fresh, config, node = await fresh_for(ctx, current, None, "delete", located=row)
    vmid = fresh.identity
    if is_protected(config):
        raise ProxmoxError(
            ctx.name,
            f"refusing to delete VM {vmid} ({fresh.name}): protection is set; "
            "set protect: false and apply before removing it",
        )
    assert fresh.marker is not None
    # The incarnation seen now: a replay of this entry acts only on this very VM, never on
    # a successor that got the vmid after the delete went through.
    with journal.operation(
        "delete",
        backend=ctx.name,
        vm=fresh.name,
        identity=vmid,
        node=node,
        incarnation=fresh.marker.incarnation,
        failed_when=never,
    ) as entry:
        await vmops.destroy(ctx, node, vmid, track=tracker(journal, entry))


async def rename(ctx: Ctx, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
    """Give a replacement VM (made under a temporary name) its final name: one config PUT.

    PVE names need not be unique, so this never fails on the old VM's name; sand
    renames only after the old VM is gone, so no listing shows two of a name.
    """
    fresh, config, node = await fresh_for(ctx, current, None, "rename")
    vmid = fresh.identity
    assert fresh.marker is not None
    with journal.operation(
        "rename",
        backend=ctx.name,
        vm=name,
        identity=vmid,
        node=node,
        old_name=fresh.name,
        failed_when=never,
    ):
        marker = dataclasses.replace(fresh.marker, name=name)
        await ctx.client.put(
            f"{vmops.vm_path(node, vmid)}/config",
            name=name,
            description=marker_description(ctx, config, marker),
            digest=config.get("digest"),
        )
    observed, _ = await vmops.read_vm(ctx, node, vmid, None, pool=fresh.details.get("pool"))
    return observed


async def mark_converged(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
) -> None:
    """Write the desired fingerprints into tags and description, operator text kept.

    The secrets tag is what ``secrets`` says was delivered, or, when nothing was
    delivered this run, the one the VM carries now."""
    refuse(ctx, current, "mark")
    node = current.node or ""
    seen = current.marker.incarnation if current.marker else ""
    path = vmops.vm_path(node, current.identity)
    for attempt in range(3):
        config = await read_config(ctx, node, current.identity)
        marker = converged_marker(ctx, vm, current.identity, config, secrets, seen=seen)
        try:
            await ctx.client.put(
                f"{path}/config",
                tags=mk.merge_tags(config.get("tags"), marker),
                description=desc.merge_description(
                    config.get("description"),
                    marker,
                    protect=vm.protect,
                    **{firewall.MARKER_KEY: vm.infra().get("egress")},
                ),
                digest=config.get("digest"),
            )
            return
        except ProxmoxError as e:
            # Someone edited the config between the read and the write: read again.
            if e.kind is not ErrorKind.CONFLICT or attempt == 2:
                raise


def converged_marker(
    ctx: Ctx,
    vm: DesiredVM,
    vmid: str,
    config: Mapping[str, Any],
    secrets: SecretsRecord | None,
    *,
    seen: str,
) -> Marker:
    """The marker ``mark_converged`` writes on VM ``vmid`` whose config is ``config``
    (its tags and description checked first: ours, the incarnation ``seen``). The
    secrets tag is what ``secrets`` says was delivered, else the one the VM carries."""
    found = mk.parse_tags(config.get("tags"))
    stamp, stamped_at = (
        (secrets.stamp, secrets.delivered_at)
        if secrets is not None
        else (found.secrets, found.secrets_at)
    )
    described = desc.parse_description(config.get("description"))
    said = owner(ctx, vmid, mk.claims(found, described))
    if said is Ownership.OTHER_BACKEND:
        raise ProxmoxError(
            ctx.name, f"refusing to mark VM {vmid}: it belongs to another backend entry"
        )
    if said is not Ownership.MANAGED:
        raise ProxmoxError(ctx.name, f"refusing to mark VM {vmid}: not ours")
    incarnation = described.incarnation if described is not None else ""
    if seen and incarnation != seen:
        raise ProxmoxError(
            ctx.name, f"refusing to mark VM {vmid}: it is not the VM that was observed"
        )
    block = desc.parse_block(config.get("description")) or {}
    return own_marker(
        ctx,
        Marker(
            ctx.project,
            vm.name,
            vmid,
            vm.fingerprint,
            vm.guest_fingerprint,
            vm.image,
            secrets=stamp,
            secrets_at=stamped_at if stamp else 0,
            incarnation=incarnation,
            created_at=desc.created_at_of(block) or found.created_at,
            pool=vm.spare_of,
        ),
        block,
    )
