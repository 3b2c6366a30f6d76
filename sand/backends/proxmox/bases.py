"""Golden bases on Proxmox: a template in the pool, built once per fingerprint.

Build (each step journalled under one ``base`` entry, its vmid known before the clone):

1. a full clone of the base's source template into a fresh vmid, in the pool, named
   ``sand-golden-<image>-<fp8>``, its description sand's golden block (state
   ``building``) and its tags ``sand-golden-new`` with the project and backend;
2. one config PUT (cores, memory, CPU type, net0 on the bridge, cloud-init user and
   key, DHCP, the guest agent); start; its address from the guest agent;
3. the caller provisions it (``sand.provision.provision_base``: its user and machine
   steps, each recorded in the guest's ledger, then generalized);
4. shutdown; the fingerprint tag and the ``ready`` block written; converted to a
   template. A VM is only ever cloned from a template carrying its fingerprint tag,
   so a build cut short at any step leaves nothing a VM could be made from, and the
   journal replay (or the next plan) deletes what it left.

Delete re-reads the base and the listing first and keeps it, saying why, when a VM made
from it exists now or anything is cloning in the pool; a VM that does not carry this
project's golden block for this entry and its own vmid is refused.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

from sand.backends.protocol import BaseProvisioner
from sand.backends.proxmox import description as desc
from sand.backends.proxmox import guest, vmids, vmops
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.clone import ID_ATTEMPTS
from sand.backends.proxmox.context import Ctx, in_pool
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.golden_seen import BASE_NAME_PREFIX, built_here
from sand.backends.proxmox.observe import Row, listing, read_config
from sand.backends.proxmox.sources import find_template, parse_image, pick_node, read_pubkey
from sand.desired.spec import DesiredBase
from sand.errors import SandError
from sand.observed import ObservedBase, ObservedVM, Ownership
from sand.state.journal import Journal, JournalEntry, never

# What the build machine runs with while it is provisioned; each clone sets its own.
BUILD_CORES = 2
BUILD_MEMORY_MIB = 2048


def base_vm_name(base: DesiredBase) -> str:
    suffix = f"-{base.fingerprint[:8]}"
    return (BASE_NAME_PREFIX + base.name)[: 63 - len(suffix)].rstrip("-") + suffix


async def build(
    ctx: Ctx, base: DesiredBase, provision: BaseProvisioner, journal: Journal
) -> ObservedBase:
    pubkey = read_pubkey(ctx)
    rows = await listing(ctx)
    ref, storage = parse_image(base.source, ctx.config.storage)
    node = await pick_node(ctx, None)
    template = find_template(ctx, rows, ref, node)
    name = base_vm_name(base)
    vmid, entry = await _clone(ctx, base, name, template, node, storage, journal)
    track: vmops.Track = lambda upid: journal.task(entry, upid)  # noqa: E731
    try:
        config = await read_config(ctx, node, vmid)
        await ctx.client.put(
            f"{vmops.vm_path(node, vmid)}/config", **_build_config(ctx, base, config, pubkey)
        )
        journal.step(entry, "configured")
        await vmops.start(ctx, node, vmid, track=track)
        journal.step(entry, "started")
        machine = ObservedVM(ctx.name, name, str(vmid), Ownership.UNMANAGED, "running", node=node)
        endpoint = await guest.endpoint(ctx, None, machine)
        await provision(base, endpoint)
        journal.step(entry, "provisioned")
        await vmops.shutdown(ctx, node, vmid, track=track)
        journal.step(entry, "stopped")
        config = await read_config(ctx, node, vmid)
        await ctx.client.put(
            f"{vmops.vm_path(node, vmid)}/config",
            tags=mk.join_tags(
                [
                    *mk.operator_tags(config.get("tags")),
                    *mk.golden_tags(ctx.project, ctx.name, base.fingerprint),
                ]
            ),
            description=_description(ctx, base, vmid, template, "ready", entry.id),
            digest=config.get("digest"),
        )
        journal.step(entry, "marked")
        await ctx.client.task(
            "POST",
            f"{vmops.vm_path(node, vmid)}/template",
            {},
            what=f"conversion of golden base {base.name} (VM {vmid}) to a template",
            timeout=ctx.timeouts.template,
            on_upid=track,
        )
        config = await read_config(ctx, node, vmid)
        if str(config.get("template", "")) != "1":
            raise ProxmoxError(ctx.name, f"VM {vmid} is still not a template after conversion")
        _remember(ctx, node, vmid, config)
    except SandError:
        await _discard(ctx, node, vmid, entry, journal)
        raise
    finally:
        # Its address goes back to the pool of DHCP leases: a clone may be given it.
        for ip, holder in list(ctx.addresses.items()):
            if holder == str(vmid):
                del ctx.addresses[ip]
    journal.finish(entry)
    return ObservedBase(ctx.name, base.name, str(vmid), base.fingerprint, True)


def _remember(ctx: Ctx, node: str, vmid: int, config: dict[str, Any]) -> None:
    """The base just built, as the next listing would show it, added to the rows the
    observation read (every create of this run finds its templates there) and its
    config to the templates read this batch: clones of it ask PVE for neither."""
    disk = vmops.boot_disk(config)
    row = vmops.row_of(node, vmid, {"status": "stopped"}, config)
    row.update(type="qemu", pool=ctx.config.pool, maxdisk=disk[1] if disk else 0)
    if ctx.last_rows is not None:
        ctx.last_rows = [*(r for r in ctx.last_rows if str(r["vmid"]) != str(vmid)), row]
    read: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    read.set_result(config)
    ctx.template_configs[(node, str(vmid))] = read


async def _clone(
    ctx: Ctx,
    base: DesiredBase,
    name: str,
    template: Row,
    node: str,
    storage: str,
    journal: Journal,
) -> tuple[int, JournalEntry]:
    """A full clone of the source into a fresh vmid (another when a client takes it)."""
    async with await ctx.clone_slots():
        for _ in range(ID_ATTEMPTS):
            vmid = await vmids.take(ctx)
            entry = await journal.begin_async(
                "base",
                backend=ctx.name,
                vm=base.name,
                identity=str(vmid),
                node=node,
                project=ctx.project,
                fingerprint=base.fingerprint,
                template=str(template["vmid"]),
            )
            params: dict[str, Any] = {
                "newid": vmid,
                "name": name,
                "description": _description(ctx, base, vmid, template, "building", entry.id),
                "pool": ctx.config.pool,
                "storage": storage,
                "full": 1,
            }
            if template.get("node") != node:
                params["target"] = node
            tnode, tvmid = str(template.get("node")), template["vmid"]
            track = _tracker(journal, entry)
            try:
                await ctx.client.task(
                    "POST",
                    f"{vmops.vm_path(tnode, tvmid)}/clone",
                    params,
                    what=f"clone of template {tvmid} into golden base {base.name} (VM {vmid})",
                    timeout=ctx.timeouts.clone,
                    on_upid=track,
                )
            except ProxmoxError as e:
                if e.kind is ErrorKind.EXISTS and e.upid is None:
                    journal.finish(entry, "failed")
                    await vmids.taken(ctx, vmid)
                    continue  # the id went to another client first: nothing was made
                if not e.transient:
                    journal.finish(entry, "failed")
                raise  # a clone that may still run is settled by the journal replay
            finally:
                ctx.cloning_ids.discard(vmid)
            journal.step(entry, "cloned")
            return vmid, entry
    raise ProxmoxError(
        ctx.name,
        f"could not allocate a vmid for golden base {base.name}: {ID_ATTEMPTS} ids were "
        "taken by other clients first",
        transient=True,
    )


def _tracker(journal: Journal, entry: JournalEntry) -> vmops.Track:
    return lambda upid: journal.task(entry, upid)


def _description(ctx: Ctx, base: DesiredBase, vmid: int, template: Row, state: str, op: str) -> str:
    note = (
        f"Golden base of image {base.name!r}, built by sand for project {ctx.project} from "
        f"template {template.get('name') or template['vmid']}. sand clones VMs from it and "
        "deletes it when none needs it and none was made from it."
    )
    block = desc.render_golden_block(
        ctx.project, ctx.name, vmid, base.name, base.fingerprint, base.source, state, op
    )
    return f"{note}\n\n{block}"


def _build_config(
    ctx: Ctx, base: DesiredBase, config: dict[str, Any], pubkey: str
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "cores": BUILD_CORES,
        "sockets": 1,
        "cpu": ctx.config.cpu,
        "memory": BUILD_MEMORY_MIB,
        "net0": vmops.with_bridge(config.get("net0"), ctx.config.bridge),
        "ciuser": base.user,
        "sshkeys": urllib.parse.quote(pubkey + "\n", safe=""),
        "ipconfig0": "ip=dhcp",
        "agent": "1",
        # The source template's sand tags (sand-template) are not the base's.
        "tags": mk.join_tags(
            [
                *mk.operator_tags(config.get("tags")),
                *mk.golden_tags(ctx.project, ctx.name, None),
            ]
        ),
    }
    if not vmops.has_cloudinit(config):
        slot = vmops.free_ide(config)
        if slot is None:
            raise ProxmoxError(ctx.name, "the golden base has no free IDE slot for cloud-init")
        params[slot] = f"{parse_image(base.source, ctx.config.storage)[1]}:cloudinit"
    return params


async def _discard(ctx: Ctx, node: str, vmid: int, entry: JournalEntry, journal: Journal) -> None:
    """Remove a build that failed; when that fails too, the open entry has recovery do it."""
    try:
        await vmops.destroy(ctx, node, vmid, track=lambda upid: journal.task(entry, upid))
    except SandError:
        return
    journal.finish(entry, "failed")


def ready_base(ctx: Ctx, rows: list[Row], fingerprint: str) -> Row | None:
    """The template of this project's ready golden base with ``fingerprint``, if any."""
    mine = mk.backend_tag(ctx.name)
    for row in sorted(rows, key=lambda r: int(r["vmid"])):
        tags = mk.parse_tags(row.get("tags"))
        if (
            tags.golden == fingerprint
            and tags.project == ctx.project
            and tags.backend == mine
            and row.get("template")
            and in_pool(ctx, row)
        ):
            return row
    return None


async def delete(ctx: Ctx, base: ObservedBase, journal: Journal) -> str:
    rows = await listing(ctx)
    row = next((r for r in rows if str(r["vmid"]) == base.identity), None)
    if row is None:
        if not await vmops.id_taken(ctx, base.identity):
            return "already gone"
        raise ProxmoxError(
            ctx.name,
            f"refusing to delete golden base {base.name} (VM {base.identity}): it has left "
            f"pool {ctx.config.pool!r}",
        )
    node = str(row.get("node"))
    config = await read_config(ctx, node, base.identity)
    tags = mk.parse_tags(config.get("tags"))
    if not (
        built_here(ctx, base.identity, config)
        and tags.golden is not None
        and tags.project == ctx.project
        and in_pool(ctx, row)
    ):
        raise ProxmoxError(
            ctx.name,
            f"refusing to delete VM {base.identity}: it is not a golden base sand built for "
            f"project {ctx.project} on this backend",
            kind=ErrorKind.REFUSED,
        )
    fingerprint = "" if tags.golden == mk.NEW else tags.golden
    made = [
        str(r.get("name") or r["vmid"])
        for r in rows
        if fingerprint and mk.parse_tags(r.get("tags")).base == fingerprint
    ]
    if made:
        return f"kept: VMs were made from it since the plan ({', '.join(made)})"
    cloning = [str(r["vmid"]) for r in rows if r.get("lock") == "clone" and in_pool(ctx, r)]
    if row.get("lock") or config.get("lock"):
        return f"kept: it is locked ({row.get('lock') or config.get('lock')})"
    if cloning or ctx.cloning_ids:
        return f"kept: a clone is running in pool {ctx.config.pool!r}"
    if str(config.get("protection", "0")) in ("1", "true"):
        return "kept: its protection is set"
    with journal.operation(
        "base-delete",
        backend=ctx.name,
        vm=base.name,
        identity=base.identity,
        node=node,
        fingerprint=fingerprint,
        failed_when=never,
    ) as entry:
        await vmops.destroy(ctx, node, base.identity, track=lambda upid: journal.task(entry, upid))
    return "deleted"
