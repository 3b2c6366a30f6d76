"""Observation: one ``GET /cluster/resources?type=vm``, deep reads only where needed.

A VM whose tags carry this project's marker, its own vmid and the desired
fingerprint is settled from the listing alone (what the listing cannot show, such as
the CPU type, is vouched for by the fingerprint). A config read (``GET …/pending``:
the description marker, ``protection``, ``cpu``, and what waits for the next start)
happens only for VMs whose tag fingerprint differs, that are locked, whose marker is
incomplete, or that are unmarked but carry a desired name. The guest agent is never called here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import golden_seen, units
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx, in_pool
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.pending import cpu_type_of, pending_fields, read_pending
from sand.backends.proxmox.pool_audit import assert_pools_visible
from sand.backends.proxmox.row import HIBERNATED_LOCK, as_int, booted_at, power_of
from sand.backends.proxmox.row import Row as Row  # re-exported: imported from here
from sand.backends.proxmox.row import is_protected as is_protected
from sand.desired import DesiredVM
from sand.observed import (
    Claim,
    Marker,
    Observation,
    ObservedBase,
    ObservedVM,
    Ownership,
    ownership,
)

DEEP = object()  # classify(): "needs the VM's config"

_LISTING = ("cluster/resources", {"type": "vm"})


def send_listing(ctx: Ctx) -> None:
    """The listing sent now, for the next :func:`listing` to take (a plan's, ``sand
    plan`` only: a run that changes the world must read it after it decided to)."""
    ctx.client.send_early("GET", *_LISTING)


async def listing(ctx: Ctx) -> list[Row]:
    """The cluster's QEMU guests the token may audit (one request)."""
    rows = await ctx.client.get(_LISTING[0], **_LISTING[1]) or []
    return [r for r in rows if r.get("type", "qemu") == "qemu" and "vmid" in r]


async def read_config(ctx: Ctx, node: str, vmid: str | int) -> dict[str, Any]:
    return dict(await ctx.client.get(f"nodes/{node}/qemu/{vmid}/config") or {})


async def template_config(ctx: Ctx, template: Row) -> dict[str, Any]:
    """The config of a template clones are made from: read once per batch (since the
    last observation), however many clones of it are made at once."""
    key = (str(template.get("node")), str(template["vmid"]))
    loop = asyncio.get_running_loop()
    held = ctx.template_configs.get(key)
    failed = held is not None and held.done() and (held.cancelled() or held.exception())
    if held is None or held.get_loop() is not loop or failed:
        held = asyncio.ensure_future(read_config(ctx, *key))
        ctx.template_configs[key] = held
    return dict(await asyncio.shield(held))


def classify(
    ctx: Ctx,
    row: Row,
    desired: Mapping[str, DesiredVM],
    config: Mapping[str, Any] | None = None,
) -> ObservedVM | object | None:
    """An ObservedVM, None (not sand's business), or DEEP (read the config first).

    Whose VM it is comes from the one rule (:func:`owner`), on the tags alone while the
    listing decides, on tags and description after a deep read. What PVE adds to it stays
    here: a template, or a VM of ours outside this backend's pool, is never managed."""
    if config is None:
        return _from_listing(ctx, row, desired)
    return _from_config(ctx, row, desired, config)


def _from_listing(
    ctx: Ctx, row: Row, desired: Mapping[str, DesiredVM]
) -> ObservedVM | object | None:
    """What the listing's row alone decides: another's VM by its tags, or ours when its
    fingerprint tag vouches for everything the row cannot show; else DEEP or None."""
    vmid = str(row["vmid"])
    name = str(row.get("name") or "")
    tags = mk.parse_tags(row.get("tags"))
    locked = bool(row.get("lock"))
    template = bool(row.get("template"))
    mine = mk.backend_tag(ctx.name)
    tag_claims = mk.claims(tags, None)
    if tag_claims:
        want = desired.get(name)
        said = owner(ctx, vmid, tag_claims)
        if said is not Ownership.MANAGED:
            return _observed(ctx, row, said, _tag_marker(tags, name), None)
        if (
            want is not None
            and not template
            and not locked
            and in_pool(ctx, row)
            and tags.fingerprint
            and tags.fingerprint == want.fingerprint
        ):
            # The fingerprint covers every field sand manages, guest content included,
            # so what the listing cannot show is vouched for by it.
            fast = Marker(
                ctx.project,
                name,
                vmid,
                want.fingerprint,
                want.guest_fingerprint,
                want.image,
                secrets=tags.secrets,
                secrets_at=tags.secrets_at,
                backend=ctx.name if tags.backend == mine else "",
                created_at=tags.created_at,
                base=tags.base,
                pool=tags.pool,
            )
            # The egress the fingerprint vouches for: written with it (the marker's).
            enforced = want.infra().get("egress") if want.egress is not None else None
            return _observed(
                ctx,
                row,
                Ownership.MANAGED,
                fast,
                want,
                protect=want.protect,
                cpu=want.cpu,
                egress=str(enforced) if enforced is not None else None,
            )
        return DEEP
    if tags.present or name in desired:
        return DEEP
    if locked and row.get("pool") == ctx.config.pool:
        return DEEP  # perhaps a clone of ours still in flight (no name, no tags yet)
    return None


def _from_config(
    ctx: Ctx, row: Row, desired: Mapping[str, DesiredVM], config: Mapping[str, Any]
) -> ObservedVM | None:
    """What the row and the VM's config decide together (the description's marker, the
    protection flag, the CPU type)."""
    vmid = str(row["vmid"])
    name = str(row.get("name") or "")
    tags = mk.parse_tags(row.get("tags"))
    template = bool(row.get("template"))
    mine = mk.backend_tag(ctx.name)
    block = desc.parse_block(config.get("description")) or {}
    described = desc.parse_description(config.get("description"))
    found = mk.claims(tags, described)
    protect = is_protected(config)
    lock = row.get("lock") or config.get("lock")
    if not found:
        if name in desired:
            return _observed(
                ctx, row, Ownership.UNMANAGED, None, None, protect=protect, lock=lock, deep=True
            )
        return None
    said = owner(ctx, vmid, found)
    project, identity = found[0].project, found[0].identity
    fingerprint = tags.fingerprint if tags.identity is not None else None
    if described is not None:
        if fingerprint is None:
            fingerprint = described.fingerprint
        elif fingerprint != described.fingerprint:
            fingerprint = ""  # tags and description disagree: treat as not converged
    named_backend = described.backend if described is not None and described.backend else ""
    if not named_backend and tags.backend == mine:
        named_backend = ctx.name
    the_marker = Marker(
        project=project,
        name=described.name if described is not None else name,
        identity=identity,
        fingerprint=fingerprint or "",
        guest_fingerprint=described.guest_fingerprint if described is not None else "",
        image=described.image if described is not None else "",
        secrets=tags.secrets,
        secrets_at=tags.secrets_at,
        backend=named_backend,
        incarnation=described.incarnation if described is not None else "",
        # The description's (written at the clone); the tag mirrors it for the listing.
        created_at=(described.created_at if described is not None else 0) or tags.created_at,
        base=(described.base if described is not None else "") or tags.base,
        pool=(described.pool if described is not None else "") or tags.pool,
    )
    notes: dict[str, str] = {}
    if template and said is Ownership.MANAGED:
        said = Ownership.UNMANAGED  # a template is never sand's to change
        notes["note"] = "a template carrying sand's marker; templates are never managed"
    elif said is Ownership.MANAGED and not in_pool(ctx, row) and lock != "clone":
        # Another backend of this project (another pool), moved out by an operator, or in
        # no pool at all (a broad token sees it): never sand's to change. A clone in
        # flight joins the pool when it ends, and is locked until then.
        said = Ownership.UNMANAGED
        where = f"in pool {row.get('pool')!r}" if row.get("pool") else "in no pool"
        notes["note"] = (
            f"carries this project's marker but is {where}, not {ctx.config.pool!r}; left alone"
        )
    if said is Ownership.OTHER_BACKEND:
        notes["note"] = "carries the marker of another backend entry of this project; left alone"
    want = desired.get(the_marker.name) if said is Ownership.MANAGED else None
    return _observed(
        ctx,
        row,
        said,
        the_marker,
        want,
        protect=protect,
        operator_protected=protect and block.get("protect") is not True,
        lock=lock,
        deep=True,
        notes=notes,
        cpu=cpu_type_of(config),
        egress=desc.enforced_egress(block, want),
    )


def owner(ctx: Ctx, vmid: str, claims: Sequence[Claim]) -> Ownership:
    """The one ownership rule (:func:`sand.observed.ownership`) for a VM at ``vmid`` of
    this backend, its claims read off tags and description (``marker.claims``). Where a
    VM of ours is not managed (a template, outside the pool) is a PVE fact: the callers'."""
    return ownership(claims, identity=vmid, project=ctx.project, backend=mk.backend_tag(ctx.name))


def _tag_marker(tags: mk.TagMarker, name: str) -> Marker:
    return Marker(
        project=tags.project or "",
        name=name,
        identity=tags.identity or "",
        fingerprint=tags.fingerprint or "",
        backend=mk.backend_of_tag(tags.backend),
        created_at=tags.created_at,
        pool=tags.pool,
    )


def _observed(
    ctx: Ctx,
    row: Row,
    ownership: Ownership,
    the_marker: Marker | None,
    want: DesiredVM | None,
    *,
    protect: bool = False,
    operator_protected: bool = False,
    lock: object = None,
    deep: bool = False,
    notes: Mapping[str, str] | None = None,
    cpu: str | None = None,
    egress: str | None = None,
) -> ObservedVM:
    vmid = str(row["vmid"])
    name = the_marker.name if the_marker and ownership is Ownership.MANAGED else row.get("name")
    lock = lock if lock is not None else row.get("lock")
    details = {"vmid": vmid, "status": str(row.get("status") or "")}
    if row.get("pool"):
        details["pool"] = str(row["pool"])
    if the_marker is not None and ownership is Ownership.MANAGED and row.get("name") != name:
        details["pve_name"] = str(row.get("name") or "")
    details.update(notes or {})
    return ObservedVM(
        backend=ctx.name,
        name=str(name or f"VM {vmid}"),
        identity=vmid,
        ownership=ownership,
        power=power_of(row),
        cpus=as_int(row.get("maxcpu")),
        cpu=cpu,
        memory=units.observed_memory(as_int(row.get("maxmem")), want.memory if want else None),
        disk=units.observed_disk(as_int(row.get("maxdisk")), want.disk if want else None),
        protect=protect,
        operator_protected=operator_protected,
        lock=str(lock) if lock else None,
        node=str(row.get("node") or "") or None,
        marker=the_marker,
        deep=deep,
        template=bool(row.get("template")),
        details=details,
        booted_at=booted_at(row),
        slept=mk.parse_tags(row.get("tags")).asleep if ownership is Ownership.MANAGED else None,
        hibernated=lock == HIBERNATED_LOCK,
        egress=egress,
    )


async def observe(ctx: Ctx, desired: Sequence[DesiredVM]) -> Observation:
    start = ctx.client.requests
    by_name = {vm.name: vm for vm in desired}
    try:
        rows = await listing(ctx)
    except ProxmoxError as e:
        # Unreachable (a refused connection is final before PVE ever answered): unknown.
        if not (e.transient or e.kind is ErrorKind.UNREACHABLE):
            raise
        return Observation(
            backend=ctx.name,
            vms=(),
            unknown_reason=f"cannot list the cluster's VMs: {e.detail}",
            requests=ctx.client.requests - start,
        )
    await assert_pools_visible(ctx, rows)
    ctx.last_rows = list(rows)
    ctx.template_configs.clear()  # a new batch: templates are read afresh
    ctx.next_vmid = None  # and the ids to clone into asked for once more
    ctx.observed_configs = {}  # and the configs of VMs read deep
    ctx.observed_at = time.monotonic()
    decided: list[ObservedVM] = []
    deep: list[Row] = []
    for row in rows:
        if mk.parse_tags(row.get("tags")).golden is not None:
            continue  # a golden base: never a VM (bases_of reads them)
        outcome = classify(ctx, row, by_name)
        if outcome is DEEP:
            deep.append(row)
        elif isinstance(outcome, ObservedVM):
            decided.append(outcome)

    slots = asyncio.Semaphore(ctx.deep_reads)

    async def one(row: Row) -> ObservedVM | str | None:
        async with slots:
            try:
                config, pending = await read_pending(ctx, str(row.get("node")), row["vmid"])
            except ProxmoxError as e:
                if e.status == 500 and e.kind is ErrorKind.NOT_FOUND:
                    return None  # gone since the listing
                return f"cannot read VM {row['vmid']}'s config: {e.detail}"
        ctx.observed_configs[str(row["vmid"])] = config
        outcome = classify(ctx, row, by_name, config)
        if not isinstance(outcome, ObservedVM):
            return None
        waiting = pending_fields(config, pending)
        return dataclasses.replace(outcome, pending=waiting) if waiting else outcome

    results = await asyncio.gather(*(one(row) for row in deep))
    problems = [r for r in results if isinstance(r, str)]
    decided.extend(r for r in results if isinstance(r, ObservedVM))
    decided.sort(key=lambda vm: int(vm.identity))
    warnings = tuple(
        f"VM {vm.identity} ({vm.name}) carries the marker of VM {vm.marker.identity}: "
        "a copy made outside sand, left alone"
        for vm in decided
        if vm.ownership is Ownership.COPIED and vm.marker is not None
    )
    bases, lookalikes = await _confirmed(ctx, golden_seen.bases_of(ctx, rows), rows)
    return Observation(
        backend=ctx.name,
        vms=tuple(decided),
        unknown_reason="; ".join(problems) if problems else None,
        requests=ctx.client.requests - start,
        warnings=warnings + lookalikes,
        bases=bases,
    )


async def _confirmed(
    ctx: Ctx, found: Sequence[ObservedBase], rows: Sequence[Row]
) -> tuple[tuple[ObservedBase, ...], tuple[str, ...]]:
    """The bases, less the look-alikes among those the plan could delete as half-made
    (their description is read: see :mod:`sand.backends.proxmox.golden_seen`)."""
    by_id = {str(r["vmid"]): r for r in rows}
    kept: list[ObservedBase] = []
    warnings: list[str] = []
    for base in found:
        row = by_id[base.identity]
        if base.ready:
            kept.append(base)
            continue
        try:
            config = await read_config(ctx, str(row.get("node")), base.identity)
        except ProxmoxError as e:
            if e.status == 500 and e.kind is ErrorKind.NOT_FOUND:
                continue  # gone since the listing
            kept.append(replace(base, busy=f"its config cannot be read: {e.detail}"))
            continue
        if golden_seen.built_here(ctx, base.identity, config):
            kept.append(base)
        else:
            warnings.append(golden_seen.lookalike(ctx, base, str(row.get("name") or "")))
    return tuple(kept), tuple(warnings)
