"""Preflight: before a change is planned, check what PVE would refuse, changing nothing.

Seen without it: a typo in ``image`` planned a replacement, apply deleted the old
VM and only then failed with "template not found". Everything a clone, resize or
memory change depends on is checked here, against what the cluster shows now:

* the template (by name or vmid) exists, is a template, and lives on a node that
  is online — from the listing ``observe`` already made (no request);
* the placement nodes exist and are online, and the VM's memory and CPUs fit a
  node at all — ``GET /nodes`` (one request);
* the clone's storage exists on the target node, is active, holds VM images and
  has room for the disk — ``GET /cluster/resources?type=storage`` (one request);
* the bridge exists on each target node — ``GET /nodes/{node}/network`` (one per
  distinct node);
* the pool exists — from the listing when any VM is in it, else ``GET /pools/{pool}``;
* a template on local storage is cloned on its own node only — its config, once
  (:mod:`~sand.backends.proxmox.locality`);
* the token may use the bridge and write sand's tags — ``GET /access/permissions`` and
  ``GET /cluster/options`` (:mod:`~sand.backends.proxmox.refusals`).

So a plan with changes costs at most 5 + (target nodes) + (templates) requests,
however many VMs change; the no-op plan makes none. A check the token may not read (403)
is skipped with a warning: preflight never blocks on what it could not see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sand.backends.protocol import PreflightItem, PreflightProblem, PreflightReport
from sand.backends.proxmox import locality, refusals
from sand.backends.proxmox.cloudinit_drive import attach_problems
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.hibernation import state_storage_problem
from sand.backends.proxmox.observe import Row, listing
from sand.backends.proxmox.sources import identity_problem, parse_image, template_row
from sand.manifest.sizes import format_size
from sand.observed import SUSPENDED

# PVE refuses less (qemu-server's memory minimum is 16 MiB).
MIN_MEMORY = 16 << 20
SIZED = frozenset({"memory", "cpus", "disk"})


@dataclass
class _Cluster:
    """What the checks read, fetched once per preflight."""

    rows: list[Row]
    nodes: dict[str, Mapping[str, Any]] | None = None
    storages: dict[tuple[str, str], Mapping[str, Any]] | None = None
    bridges: dict[str, set[str] | None] = field(default_factory=dict)
    pool_exists: bool | None = None
    warnings: list[str] = field(default_factory=list)


async def preflight(ctx: Ctx, items: Sequence[PreflightItem]) -> PreflightReport:
    if not items:
        return PreflightReport()
    todo = [i for i in items if (i.action in _MADE or SIZED & set(i.fields)) and not i.vm.fork]
    todo += [i for i in items if i.sleep == SUSPENDED and i not in todo]  # hibernation
    start = ctx.client.requests
    rows = ctx.last_rows if ctx.last_rows is not None else await listing(ctx)
    cluster = _Cluster(rows)
    problems, cluster.warnings = await refusals.write_refusals(ctx, items, rows)
    found, warned = await attach_problems(ctx, items, rows, ctx.permissions)
    problems, cluster.warnings = [*problems, *found], [*cluster.warnings, *warned]
    destroy_first: dict[str, str] = {}
    if todo:
        await _read_nodes(ctx, cluster)
    for item in todo:
        if item.action in ("create", "replace"):
            found, why_first = await _check_create(ctx, cluster, item)
            problems += found
            if item.action == "replace" and not found and why_first:
                destroy_first[item.vm.name] = why_first
        else:
            problems += await _check_update(ctx, cluster, item)
    return PreflightReport(
        problems=tuple(problems),
        destroy_first=destroy_first,
        warnings=tuple(dict.fromkeys(cluster.warnings)),
        requests=ctx.client.requests - start,
    )


_MADE = ("create", "replace")  # a fork is made from its source, checked by the plan
# --- reads (each at most once) ---------------------------------------------------------


async def _read_nodes(ctx: Ctx, cluster: _Cluster) -> None:
    try:
        answer = await ctx.client.get("nodes")
    except ProxmoxError as e:
        cluster.warnings.append(f"preflight could not list the nodes: {e.detail}")
        return
    cluster.nodes = {str(r.get("node")): r for r in answer or [] if isinstance(r, dict)}


async def _read_storages(ctx: Ctx, cluster: _Cluster) -> None:
    if cluster.storages is not None:
        return
    try:
        answer = await ctx.client.get("cluster/resources", type="storage")
    except ProxmoxError as e:
        cluster.storages = {}
        cluster.warnings.append(f"preflight could not list storages: {e.detail}")
        return
    rows: list[Mapping[str, Any]] = [
        r for r in answer or [] if isinstance(r, dict) and r.get("type", "storage") == "storage"
    ]
    ctx.storage_rows = rows  # they size the clone slots (context.clones_at_once)
    cluster.storages = {(str(r.get("node")), str(r.get("storage"))): r for r in rows}


async def _bridges_on(ctx: Ctx, cluster: _Cluster, node: str) -> set[str] | None:
    if node not in cluster.bridges:
        try:
            answer = await ctx.client.get(f"nodes/{node}/network", type="any_bridge")
            cluster.bridges[node] = {
                str(r.get("iface")) for r in answer or [] if isinstance(r, dict)
            }
        except ProxmoxError as e:
            cluster.bridges[node] = None
            cluster.warnings.append(f"preflight could not list node {node}'s bridges: {e.detail}")
    return cluster.bridges[node]


async def _pool_exists(ctx: Ctx, cluster: _Cluster) -> bool | None:
    if cluster.pool_exists is None:
        pool = ctx.config.pool
        if any(r.get("pool") == pool for r in cluster.rows):
            cluster.pool_exists = True
        else:
            try:
                await ctx.client.get(f"pools/{pool}")
                cluster.pool_exists = True
            except ProxmoxError as e:
                if e.kind is ErrorKind.FORBIDDEN:
                    return None  # not ours to read (no Pool.Audit): the clone will tell
                cluster.pool_exists = not (e.kind is ErrorKind.NOT_FOUND or e.status == 404)
    return cluster.pool_exists


# --- checks -------------------------------------------------------------------------------


async def _check_create(
    ctx: Ctx, cluster: _Cluster, item: PreflightItem
) -> tuple[list[PreflightProblem], str]:
    """Problems of a clone, and (for a replace) why both VMs cannot be held at once."""
    vm = item.vm
    out: list[PreflightProblem] = []

    def problem(field_: str, message: str, **kw: Any) -> None:
        out.append(PreflightProblem(vm.name, field_, message, **kw))

    ref, storage = parse_image(vm.image, ctx.config.storage)
    candidates = [vm.node] if vm.node else list(ctx.config.placement_nodes)
    online = _online_nodes(ctx, cluster, candidates, problem, pinned=vm.node is not None)
    template = template_row(cluster.rows, ref)
    if template is None:
        problem(
            "image",
            f"template {ref!r} not found on the cluster (or the token lacks VM.Audit on it)",
            backend_field="template",
            skip_defaults=True,
        )
    elif not template.get("template"):
        problem(
            "image",
            f"VM {ref} is not a template; sand clones templates only",
            backend_field="template",
            skip_defaults=True,
        )
    else:
        if template.get("status") == "unknown":
            problem(
                "image",
                f"template {ref!r} is on node {template.get('node')}, which is offline",
                backend_field="template",
                skip_defaults=True,
            )
        template_disk = int(template.get("maxdisk") or 0)
        if template_disk > vm.disk:
            problem(
                "disk",
                f"template {ref!r} has a {format_size(template_disk)} disk, larger than the "
                f"{format_size(vm.disk)} asked for (disks only grow): ask for at least that much",
            )
    if vm.memory < MIN_MEMORY:
        problem("memory", f"PVE needs at least {format_size(MIN_MEMORY)} of memory")
    if online and template is not None and template.get("template"):
        online = await _clone_locality(ctx, cluster, item, template, online, storage, problem)
    _capacity(cluster, online, vm.memory, vm.cpus, problem)
    if online:
        await _read_storages(ctx, cluster)
        _storage(ctx, cluster, online, storage, vm.disk, problem)
        for node in online:
            bridges = await _bridges_on(ctx, cluster, node)
            if bridges is not None and ctx.config.bridge not in bridges:
                problem(
                    "bridge",
                    f"bridge {ctx.config.bridge!r} does not exist on node {node}",
                    on_backend=True,
                )
                break
    if await _pool_exists(ctx, cluster) is False:
        problem("pool", f"pool {ctx.config.pool!r} does not exist", on_backend=True)
    why = identity_problem(ctx)
    if why:
        problem("identity", why, on_backend=True)
    return out, _why_destroy_first(cluster, online, item)


async def _clone_locality(
    ctx: Ctx,
    cluster: _Cluster,
    item: PreflightItem,
    template: Row,
    online: list[str],
    storage: str,
    problem: Any,
) -> list[str]:
    """The nodes the clone can go to: a template on local storage clones on its own node
    only (:mod:`sand.backends.proxmox.locality`). Blocks the VM when that node is not
    one it may go to; places it there (and says so) when it is."""
    tnode = str(template.get("node") or "")
    if not tnode or all(n == tnode for n in online):
        return online
    await _read_storages(ctx, cluster)
    if not cluster.storages:
        return online  # not readable: warned already
    try:
        names = await locality.template_storages(ctx, template)
    except ProxmoxError as e:
        cluster.warnings.append(f"preflight could not read the template's config: {e.detail}")
        return online
    local = locality.not_shared(cluster.storages, tnode, [*names, storage])
    if not local:
        return online
    vm, why = item.vm, locality.local_reason(template, local)
    if tnode in online and not vm.node:
        cluster.warnings.append(
            f"VM {vm.name!r} is placed on node {tnode}: {why}, and PVE clones it only there"
        )
        return [tnode]
    others = ", ".join(n for n in online if n != tnode)
    problem(
        "node" if vm.node else ("node" if ctx.config.node else "nodes"),
        f"{why}: PVE cannot clone it to node {others} (VM uses local storage); place the VM "
        f"on node {tnode} or move the template to shared storage",
        on_backend=not vm.node,
    )
    return []


async def _check_update(ctx: Ctx, cluster: _Cluster, item: PreflightItem) -> list[PreflightProblem]:
    vm, current = item.vm, item.current
    out: list[PreflightProblem] = []

    def problem(field_: str, message: str, **kw: Any) -> None:
        out.append(PreflightProblem(vm.name, field_, message, **kw))

    node = (current.node if current else None) or ""
    nodes = [node] if node else []
    if "memory" in item.fields and vm.memory < MIN_MEMORY:
        problem("memory", f"PVE needs at least {format_size(MIN_MEMORY)} of memory")
    _capacity(
        cluster,
        nodes,
        vm.memory if "memory" in item.fields else 0,
        vm.cpus if "cpus" in item.fields else 0,
        problem,
    )
    if item.sleep == SUSPENDED and node:
        await _read_storages(ctx, cluster)
        why = state_storage_problem(ctx, node, cluster.storages, vm.memory)
        if why:
            problem("storage", f"cannot hibernate the idle VM: {why}", on_backend=True)
    if "disk" in item.fields and current is not None and current.disk and node:
        await _read_storages(ctx, cluster)
        grow = vm.disk - current.disk
        row = (cluster.storages or {}).get((node, ctx.config.storage))
        free = _free(row)
        if grow > 0 and free is not None and free < grow:
            problem(
                "disk",
                f"storage {ctx.config.storage!r} on node {node} has {format_size(free)} free; "
                f"growing the disk needs {format_size(grow)}",
            )
    return out


def _online_nodes(
    ctx: Ctx, cluster: _Cluster, candidates: list[str], problem: Any, *, pinned: bool
) -> list[str]:
    if cluster.nodes is None:
        return candidates  # could not list them: let the clone find out
    where = "node" if pinned else ("node" if ctx.config.node else "nodes")
    missing = [n for n in candidates if n not in cluster.nodes]
    for n in missing:
        problem(where, f"node {n!r} is not in the cluster", on_backend=not pinned)
    online = [
        n
        for n in candidates
        if n in cluster.nodes and cluster.nodes[n].get("status", "online") == "online"
    ]
    if not online and not missing:
        problem(
            where, f"no placement node is online ({', '.join(candidates)})", on_backend=not pinned
        )
    return online


def _capacity(cluster: _Cluster, nodes: list[str], memory: int, cpus: int, problem: Any) -> None:
    """A VM larger than every node it may run on can never start there."""
    if cluster.nodes is None or not nodes:
        return
    rows = [cluster.nodes[n] for n in nodes if n in cluster.nodes]
    mems = [int(r.get("maxmem") or 0) for r in rows if r.get("maxmem")]
    if memory and mems and memory > max(mems):
        problem(
            "memory",
            f"{format_size(memory)} is more than node memory ({format_size(max(mems))} on "
            f"{', '.join(nodes)})",
        )
    cores = [int(r.get("maxcpu") or 0) for r in rows if r.get("maxcpu")]
    if cpus and cores and cpus > max(cores):
        problem("cpus", f"{cpus} CPUs is more than the node has ({max(cores)})")


def _storage(
    ctx: Ctx, cluster: _Cluster, nodes: list[str], storage: str, disk: int, problem: Any
) -> None:
    storages = cluster.storages or {}
    if not storages:
        return  # not readable: warned already
    field_ = "storage" if storage == ctx.config.storage else "image"
    on_backend = field_ == "storage"
    usable = []
    for node in nodes:
        row = storages.get((node, storage))
        if row is None:
            continue
        if row.get("status", "available") != "available":
            problem(
                field_, f"storage {storage!r} is not active on node {node}", on_backend=on_backend
            )
            return
        if "images" not in str(row.get("content", "images")).split(","):
            problem(
                field_,
                f"storage {storage!r} does not hold VM disk images (content: {row.get('content')})",
                on_backend=on_backend,
            )
            return
        usable.append(row)
    if not usable:
        problem(
            field_,
            f"storage {storage!r} does not exist on node {', '.join(nodes)} (or the token "
            "lacks Datastore.Audit on it)",
            on_backend=on_backend,
        )
        return
    room = max((f for f in (_free(r) for r in usable) if f is not None), default=None)
    if room is not None and room < disk:
        problem(
            "disk",
            f"storage {storage!r} has {format_size(room)} free; the disk needs {format_size(disk)}",
        )


def _why_destroy_first(cluster: _Cluster, nodes: list[str], item: PreflightItem) -> str:
    """Why the new VM cannot run beside the old one (""), judged by free memory."""
    if cluster.nodes is None or not nodes:
        return ""
    need = item.vm.memory
    frees = {
        n: int(cluster.nodes[n].get("maxmem") or 0) - int(cluster.nodes[n].get("mem") or 0)
        for n in nodes
        if cluster.nodes[n].get("maxmem")
    }
    if not frees or max(frees.values()) >= need:
        return ""
    best = max(frees, key=lambda n: frees[n])
    return (
        f"node {best} has {format_size(max(frees[best], 0))} of memory free and the "
        f"replacement needs {format_size(need)} while the old VM still runs"
    )


def _free(row: Mapping[str, Any] | None) -> int | None:
    if row is None or not row.get("maxdisk"):
        return None
    return int(row.get("maxdisk") or 0) - int(row.get("disk") or 0)
