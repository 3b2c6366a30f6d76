"""Create: adopt a VM of ours if one exists, else clone the template, configure, start.

Order (each step journalled): pick node, the clone into a fresh vmid
(``clone.py``), one config PUT (CPU, memory, NIC, cloud-init, tags; the
fingerprints too when nothing follows), a duplicate check (unless the
project's lease is held), disk resize (when the disk grows), start.

Requests per VM: the clone and its task, the config write, the start and its
task: five; a disk larger than the template's adds the resize and its task. The
template's config and the id clones count from (``vmids.py``) are read once per
batch, not per clone.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
import weakref
from typing import Any

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import firewall, locality, units, vmops
from sand.backends.proxmox import fork as fork_mod
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.bases import ready_base
from sand.backends.proxmox.clone import clone
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.lifecycle import mark_converged
from sand.backends.proxmox.observe import (
    DEEP,
    Row,
    classify,
    listing,
    read_config,
    template_config,
)
from sand.backends.proxmox.pending import cpu_type_of
from sand.backends.proxmox.sources import find_template, parse_image, pick_node, read_pubkey
from sand.desired import DesiredVM
from sand.observed import Marker, ObservedVM, Ownership
from sand.state.journal import Journal, JournalEntry

# Creates of one manifest entry in this process run one at a time (per event loop).
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, ...], asyncio.Lock]]
_LOCKS = weakref.WeakKeyDictionary()


def _entry_lock(ctx: Ctx, name: str) -> asyncio.Lock:
    locks = _LOCKS.setdefault(asyncio.get_running_loop(), {})
    key = (ctx.config.host, str(ctx.config.port), ctx.project, name)
    return locks.setdefault(key, asyncio.Lock())


async def find_own(ctx: Ctx, rows: list[Row], vm: DesiredVM) -> list[ObservedVM]:
    """VMs carrying this project's marker for vm.name and their own vmid, lowest id first."""
    want = {vm.name: vm}
    found: list[ObservedVM] = []
    for row in rows:
        if not _may_be_ours(row, vm.name):
            continue
        outcome = classify(ctx, row, want)
        if outcome is DEEP:
            try:
                config = await read_config(ctx, str(row.get("node")), row["vmid"])
            except ProxmoxError as e:
                if e.kind is ErrorKind.NOT_FOUND:
                    continue
                raise
            outcome = classify(ctx, row, want, config)
        if (
            isinstance(outcome, ObservedVM)
            and outcome.ownership is Ownership.MANAGED
            and outcome.name == vm.name
        ):
            found.append(outcome)
    return sorted(found, key=lambda o: int(o.identity))


def _may_be_ours(row: Row, name: str) -> bool:
    """A row find_own would look into for entry ``name``."""
    return row.get("name") == name or bool(row.get("lock") and not row.get("name"))


async def _rows_for(ctx: Ctx, vm: DesiredVM) -> list[Row]:
    """The listing a create starts from: the observation's own (no request per VM),
    unless it shows a VM that may be this entry's (then a fresh one decides whether to
    adopt it). A VM made since the observation is found by the check after the clone."""
    seen = ctx.last_rows
    if seen is not None and not any(_may_be_ours(r, vm.name) for r in seen):
        return [dict(r) for r in seen]
    return await listing(ctx)


async def create(
    ctx: Ctx, vm: DesiredVM, journal: Journal, *, from_base: bool = False, converged: bool = False
) -> ObservedVM:
    """``converged``: nothing follows the create (no provisioning, nothing to finish),
    so its one config write carries the desired fingerprints (what ``mark_converged``
    would write after it)."""
    pubkey = read_pubkey(ctx)
    async with _entry_lock(ctx, vm.name):
        rows = await _rows_for(ctx, vm)
        own = await find_own(ctx, rows, vm)
        if own:
            return await _adopt(ctx, vm, own[0], journal, pubkey, converged)
        if vm.fork is not None:
            return await _create_fork(ctx, vm, rows, journal, pubkey, converged)
        ref, storage = parse_image(vm.image, ctx.config.storage)
        node = await pick_node(ctx, vm)
        base = ""
        if from_base:
            assert vm.base is not None
            # A base this very run built is in the rows: its build added it.
            found = ready_base(ctx, rows, vm.base.fingerprint)
            if found is None:
                raise ProxmoxError(
                    ctx.name,
                    f"golden base {vm.base.name!r} ({vm.base.fingerprint}) is not ready on "
                    f"this backend: VM {vm.name!r} is not cloned from a base that is not built",
                )
            template, base = found, vm.base.fingerprint
            ref = str(found.get("name") or found["vmid"])
        else:
            template = find_template(ctx, rows, ref, node)
        template_disk = int(template.get("maxdisk") or 0)
        if template_disk > vm.disk:
            raise ProxmoxError(
                ctx.name,
                f"template {ref!r} has a {template_disk} byte disk, larger than the {vm.disk} "
                f"asked for VM {vm.name!r} (disks only grow): ask for at least that much",
            )
        if not vm.node:  # PVE clones local storage on the template's node only
            node = await locality.clone_node(ctx, template, node, storage)
        ctx.reserved[node] = ctx.reserved.get(node, 0) + vm.memory
        # Read before the clone (once per batch): a clone's config is its template's.
        source = await template_config(ctx, template)
        made = await clone(ctx, vm, template, node, storage, journal, base=base)
        try:
            known = _cloned_config(source, vm.name, made.description)
            if vmops.bridge_of(source.get("net0")) != ctx.config.bridge:
                # Its NIC moves to another bridge keeping the MAC PVE gave the clone,
                # which only the clone's own config shows.
                known = await read_config(ctx, node, made.vmid)
            return await _setup(
                ctx,
                vm,
                node,
                made.vmid,
                made.entry,
                journal,
                pubkey,
                cloned=known,
                converged=converged,
            )
        except ProxmoxError:
            journal.step(made.entry, "failed")
            raise


async def _create_fork(
    ctx: Ctx, vm: DesiredVM, rows: list[Row], journal: Journal, pubkey: str, converged: bool
) -> ObservedVM:
    """A full clone of the source's snapshot on the source's node (``fork.py``), then
    set up as any clone: its own marker, cloud-init user and key, CPU and memory."""
    source = fork_mod.source_row(ctx, rows, vm)
    node = str(source.get("node"))
    if int(source.get("maxdisk") or 0) > vm.disk:
        raise ProxmoxError(
            ctx.name,
            f"VM {vm.name!r} asks for a smaller disk than its source {source.get('name')!r} "
            "has (disks only grow): ask for at least that much",
        )
    ctx.reserved[node] = ctx.reserved.get(node, 0) + vm.memory
    entry, snapname = fork_mod.begin(ctx, vm, source, journal)
    await fork_mod.take_snapshot(ctx, vm, source, snapname, entry, journal)
    try:
        made = await clone(ctx, vm, source, node, ctx.config.storage, journal, snapname=snapname)
    finally:
        # Whatever the clone did: the source keeps no snapshot of sand's. A run killed
        # before this leaves the entry open for the journal replay to finish.
        await fork_mod.end(ctx, source, snapname, entry, journal)
    try:
        # The clone's config is its source's, which this run has not read.
        known = await read_config(ctx, node, made.vmid)
        return await _setup(
            ctx, vm, node, made.vmid, made.entry, journal, pubkey, cloned=known, converged=converged
        )
    except ProxmoxError:
        journal.step(made.entry, "failed")
        raise


def _cloned_config(source: dict[str, Any], name: str, description: str) -> dict[str, Any]:
    """A fresh clone's config, known without reading it: its template's, with the name
    and description the clone gave it. PVE gives every NIC of a clone a new MAC: the
    template's is not the clone's, so none is kept."""
    config = {k: v for k, v in source.items() if k not in ("digest", "template", "lock")}
    for key in [k for k in config if re.fullmatch(r"net\d+", k)]:
        config[key] = vmops.without_mac(config[key])
    config.update(name=name, description=description)
    return config


async def _adopt(
    ctx: Ctx, vm: DesiredVM, own: ObservedVM, journal: Journal, pubkey: str, converged: bool
) -> ObservedVM:
    """Take over a VM of ours for this entry (made by a parallel or an interrupted run)."""
    node = own.node or ""
    config = await vmops.wait_unlocked(
        ctx, node, own.identity, why="another sand run may still be creating it; re-run later"
    )
    block = desc.parse_block(config.get("description")) or {}
    # The incarnation adopted: a replay of this entry acts only on this very VM.
    entry = await journal.begin_async(
        "create",
        backend=ctx.name,
        vm=vm.name,
        identity=own.identity,
        node=node,
        project=ctx.project,
        adopt=True,
        incarnation=str(block.get("op") or ""),
    )
    made = await _setup(ctx, vm, node, int(own.identity), entry, journal, pubkey)
    if converged:
        await mark_converged(ctx, vm, made)
        made, _ = await vmops.read_vm(ctx, node, made.identity, vm, pool=ctx.config.pool)
    return made


async def _setup(
    ctx: Ctx,
    vm: DesiredVM,
    node: str,
    vmid: int,
    entry: JournalEntry,
    journal: Journal,
    pubkey: str,
    *,
    cloned: dict[str, Any] | None = None,
    converged: bool = False,
) -> ObservedVM:
    """Configure, resize and start a VM; every step may be repeated safely.

    A fresh clone (``cloned``: its config, known from its template's) costs no read
    that sand can answer itself: the config it wrote is merged into the one it knows,
    the VM is known to be stopped, and the VM returned is built from what was written
    (the next observation verifies it)."""
    path = vmops.vm_path(node, vmid)
    track: vmops.Track = lambda upid: journal.task(entry, upid)  # noqa: E731
    config = cloned if cloned is not None else await read_config(ctx, node, vmid)
    tags = mk.parse_tags(config.get("tags"))
    configured = tags.complete and tags.project == ctx.project and tags.identity == str(vmid)
    if firewall.denies(vm.egress):
        # Before the first start, the VM is never open, not even while it boots; and
        # before the config write, whose marker (with converged=True, the fingerprint)
        # vouches for it. A clone of a template holds none of sand's rules; a fork or an
        # adopted VM may.
        fresh = cloned is not None and vm.fork is None
        await firewall.write(ctx, node, vmid, vm, fresh=fresh)
        journal.step(entry, "egress")
    # A VM configured by a sand that set no CPU type (adopted after an upgrade) gets it too;
    # a VM whose egress is denied gets firewall=1 on its NIC in that same write.
    unfiltered = firewall.denies(vm.egress) and not firewall.nic_filtered(config.get("net0"))
    if not configured or unfiltered or (vm.cpu is not None and cpu_type_of(config) != vm.cpu):
        params = _base_config(ctx, vm, vmid, config, pubkey, converged=converged)
        await ctx.client.put(f"{path}/config", **params)
        journal.step(entry, "configured")
        config = {**config, **{k: v for k, v in params.items() if v is not None}}
    if cloned is not None and not ctx.leases_held:
        # Only a VM with a lower id than ours makes ours the duplicate: ours, and any
        # made later, are not looked into. Under the project's lease no other run
        # creates: what the observation showed was all there is.
        rows = await ctx.fresh_listing(lambda: listing(ctx)).get()
        earlier = [r for r in rows if int(r["vmid"]) < vmid]
        others = await find_own(ctx, earlier, vm)
        if others:
            # A parallel run made this entry's VM first: remove ours, take theirs.
            await vmops.destroy(ctx, node, vmid, track=track)
            journal.step(entry, "duplicate-removed")
            journal.finish(entry, "duplicate")
            return await _adopt(ctx, vm, others[0], journal, pubkey, converged)
    disk = vmops.boot_disk(config)
    size = disk[1] if disk is not None else 0
    if disk is not None and vm.disk > disk[1]:
        # Its own endpoint and task: PVE's config takes no disk size (``size=`` there
        # is informational), so a disk larger than the template's costs two requests.
        await vmops.resize(ctx, node, vmid, disk[0], vm.disk, track=track)
        journal.step(entry, "resized")
        size = vm.disk
    # A fresh clone is stopped; an adopted VM may have been started by the run it was
    # made by.
    stopped = cloned is not None or (
        (await vmops.read_status(ctx, node, vmid)).get("status") != "running"
    )
    if stopped:
        await vmops.start(ctx, node, vmid, track=track)
        journal.step(entry, "started")
    journal.finish(entry)
    if cloned is None:
        # Cloned into (or adopted from) this backend's pool.
        observed, _ = await vmops.read_vm(ctx, node, vmid, vm, pool=ctx.config.pool)
        return observed
    row = vmops.row_of(node, vmid, {"status": "running", "name": vm.name}, config)
    row.update(
        maxcpu=vm.cpus,
        maxmem=units.memory_mib(vm.memory) * units.MIB,
        maxdisk=size,
        pool=ctx.config.pool,
    )
    made = classify(ctx, row, {vm.name: vm}, config)
    assert isinstance(made, ObservedVM)
    return made


def _base_config(
    ctx: Ctx, vm: DesiredVM, vmid: int, config: dict[str, Any], pubkey: str, *, converged: bool
) -> dict[str, Any]:
    # The creation time the clone wrote into the description (now, for a clone an older
    # sand began): the tags carry it from here on.
    block = desc.parse_block(config.get("description"))
    made = desc.created_at_of(block) or int(time.time())
    came_from = str((block or {}).get("base") or "")
    marker = Marker(
        ctx.project,
        vm.name,
        str(vmid),
        vm.fingerprint if converged else "",
        vm.guest_fingerprint if converged else "",
        vm.image,
        backend=ctx.name,
        incarnation=str((block or {}).get("op") or ""),
        created_at=made,
        base=came_from,
        pool=vm.spare_of,
    )
    params: dict[str, Any] = {
        "cores": vm.cpus,
        "sockets": 1,
        # The template's CPU type is not kept: kvm64 (PVE's default) livelocks agents.
        "cpu": vm.cpu,
        "memory": units.memory_mib(vm.memory),
        "ciuser": vm.user,
        "sshkeys": urllib.parse.quote(pubkey + "\n", safe=""),
        "ipconfig0": "ip=dhcp",
        "tags": mk.merge_tags(config.get("tags"), marker),
    }
    if converged:
        # The marker mark_converged would write next (fingerprints in tags and block).
        params["description"] = desc.merge_description(
            config.get("description"),
            marker,
            protect=vm.protect,
            **{firewall.MARKER_KEY: vm.infra().get("egress")},
        )
    if vmops.bridge_of(config.get("net0")) != ctx.config.bridge:
        # Model kept; a NIC without its MAC gets a new one from PVE.
        params["net0"] = vmops.with_bridge(config.get("net0"), ctx.config.bridge)
    if firewall.denies(vm.egress):
        params["net0"] = firewall.with_firewall(params.get("net0", config.get("net0")))
    agent = str(config.get("agent") or "0")
    if agent.split(",")[0] not in ("1", "enabled=1"):
        params["agent"] = "1"
    if not vmops.has_cloudinit(config):
        slot = vmops.free_ide(config)
        if slot is None:
            raise ProxmoxError(ctx.name, f"VM {vmid} has no free IDE slot for a cloud-init drive")
        params[slot] = f"{parse_image(vm.image, ctx.config.storage)[1]}:cloudinit"
    return params
