"""``sand template build``: a template VM from a cloud image, in the backend's pool.

Each step is skipped when it is done already, so a second run changes nothing and an
interrupted one carries on:

1. the listing (one request): a template of that name sand built (its marker naming its
   own vmid) means done; a VM sand created but had not converted yet (an interrupted
   run) goes on at step 5; any other VM of that name is refused, never touched;
2. the privileges (``GET /access/permissions``): every one the build needs, each one
   missing named; when any is, nothing is created;
3. the image on the image storage (content ``import``): found in its listing, else
   downloaded by PVE itself (``download-url``, checksum verified when one is given);
4. ``POST /nodes/{node}/qemu``: the disk imported from the image (``import-from``),
   a cloud-init drive, the guest agent on, a serial console (``serial0: socket``,
   ``vga: serial0``: cloud images log to it), DHCP, the backend's CPU type, in the
   pool, with sand's template marker in description and tags;
5. ``POST .../template``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import template_request as tr
from sand.backends.proxmox import vmops
from sand.backends.proxmox.clone import ID_ATTEMPTS
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import Row, listing, read_config
from sand.backends.proxmox.template_request import TemplateRequest

# sand finds a clone's address through the guest agent; the image is the one place it can
# come from (sand never boots the template), and stock cloud images may lack it.
AGENT_NOTE = (
    "note: clones are reached through the QEMU guest agent, so the image must have it "
    "installed and enabled (see 'Templates' in docs/backends/proxmox.md)"
)


@dataclass(frozen=True)
class TemplateResult:
    """What the build found or did, for the command line to show."""

    name: str
    vmid: int
    node: str
    made: bool  # False: the template was there already
    steps: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        if not self.made:
            return [
                f"template {self.name!r} (VM {self.vmid} on {self.node}) exists and sand built "
                "it: nothing to do",
                *self.notes,
            ]
        return [*self.steps, *self.notes]


async def build(ctx: Ctx, req: TemplateRequest) -> TemplateResult:
    rows = await listing(ctx)
    others: list[Row] = []
    for row, config in await _named(ctx, rows, req.name):
        block = desc.parse_template_block(config.get("description"))
        if block is None or str(block.get("vmid")) != str(row["vmid"]):
            others.append(row)  # not built by sand, or a copy of one it built
        elif row.get("template") or str(config.get("template", "")) == "1":
            return TemplateResult(req.name, int(row["vmid"]), str(row.get("node")), made=False)
        else:
            return await _finish(ctx, req, row, ("carrying on an interrupted build",))
    if others:
        ids = ", ".join(str(r["vmid"]) for r in others)
        raise tr.refuse(
            ctx,
            f"a VM named {req.name!r} exists (VM {ids}) that sand did not build; it is left "
            "alone: give another --name, or remove it in PVE",
        )
    steps = [await _ensure_image(ctx, req)]
    vmid = await _create(ctx, req)
    steps.append(
        f"created VM {vmid} {req.name!r} in pool {ctx.config.pool!r} on {req.node}: disk from "
        f"{req.volid} on {ctx.config.storage}, cloud-init drive, guest agent, serial console, "
        f"cpu {ctx.config.cpu}"
    )
    row = {"vmid": vmid, "node": req.node}
    return await _finish(ctx, req, row, tuple(steps))


async def _named(ctx: Ctx, rows: list[Row], name: str) -> list[tuple[Row, dict[str, Any]]]:
    """The VMs named ``name`` the token sees, with their configs (one GET each: a name is
    rarely held more than once)."""
    found: list[tuple[Row, dict[str, Any]]] = []
    for row in sorted(rows, key=lambda r: int(r["vmid"])):
        if row.get("name") != name:
            continue
        try:
            found.append((row, await read_config(ctx, str(row.get("node")), row["vmid"])))
        except ProxmoxError as e:
            if e.kind is not ErrorKind.NOT_FOUND:
                raise
    return found


async def _ensure_image(ctx: Ctx, req: TemplateRequest) -> str:
    """Check every privilege, then find the image or have PVE download it; what was done."""
    perms: Mapping[str, Any] = await ctx.client.get("access/permissions") or {}
    members = await tr.pool_storages(ctx)
    lacking = tr.missing(ctx, perms, tr.build_privileges(ctx, req, ctx.config.cpu), members)
    downloading = tr.download_privileges(ctx, req)
    if any(f"/storage/{req.image_storage} " in item for item in lacking):
        # The storage cannot be listed, so the image cannot be found: it would be fetched.
        lacking += tr.missing(ctx, perms, downloading, members)
    if lacking:
        raise tr.refuse_missing(ctx, req, lacking)
    base = f"nodes/{req.node}/storage/{req.image_storage}"
    status = await ctx.client.get(f"{base}/status") or {}
    content = str(status.get("content") or "").split(",")
    if "import" not in content:
        raise tr.refuse(
            ctx,
            f"storage {req.image_storage!r} on {req.node} does not hold disk images to import "
            f"(content 'import'); enable it: pvesm set {req.image_storage} --content "
            + ",".join([c for c in content if c] + ["import"]),
        )
    listed = await ctx.client.get(f"{base}/content", content="import") or []
    if any(isinstance(v, dict) and v.get("volid") == req.volid for v in listed):
        return f"image {req.volid} is on the storage already: not downloaded again"
    lacking = tr.missing(ctx, perms, downloading, members)
    if lacking:
        raise tr.refuse_missing(ctx, req, lacking)
    params: dict[str, Any] = {"content": "import", "filename": req.filename, "url": req.url}
    if req.checksum is not None:
        params["checksum-algorithm"], params["checksum"] = req.checksum
    await ctx.client.task(
        "POST",
        f"{base}/download-url",
        params,
        what=f"download of {req.url} to {req.volid}",
        timeout=ctx.timeouts.download,
    )
    verified = f", {req.checksum[0]} verified" if req.checksum else " (not verified: no --checksum)"
    return f"downloaded {req.url} to {req.volid}{verified}"


def _create_params(ctx: Ctx, req: TemplateRequest, vmid: int) -> dict[str, Any]:
    storage = ctx.config.storage
    note = f"Built by `sand template build` from {req.url}."
    return {
        "vmid": vmid,
        "name": req.name,
        "pool": ctx.config.pool,
        "description": f"{note}\n\n{desc.render_template_block(req.name, vmid, req.url)}",
        "tags": mk.TEMPLATE_TAG,
        "ostype": "l26",
        "cpu": ctx.config.cpu,
        "cores": tr.TEMPLATE_CORES,
        "sockets": 1,
        "memory": tr.TEMPLATE_MEMORY_MIB,
        "scsihw": "virtio-scsi-single",
        "scsi0": f"{storage}:0,import-from={req.volid}",
        "ide2": f"{storage}:cloudinit",
        "boot": "order=scsi0",
        "agent": "1",
        "serial0": "socket",
        "vga": "serial0",
        "net0": f"virtio,bridge={ctx.config.bridge}",
        "ipconfig0": "ip=dhcp",
    }


async def _create(ctx: Ctx, req: TemplateRequest) -> int:
    """The VM, created under a fresh vmid (another when a client takes it first)."""
    for _ in range(ID_ATTEMPTS):
        vmid = int(await ctx.client.get("cluster/nextid"))
        try:
            await ctx.client.task(
                "POST",
                f"nodes/{req.node}/qemu",
                _create_params(ctx, req, vmid),
                what=f"create of template VM {vmid} ({req.name})",
                timeout=ctx.timeouts.template,
            )
        except ProxmoxError as e:
            if e.kind is ErrorKind.EXISTS and e.upid is None:
                continue  # PVE refused the id before starting: nothing was made
            raise
        return vmid
    raise ProxmoxError(
        ctx.name,
        f"template build: {ID_ATTEMPTS} vmids were taken by other clients first",
        transient=True,
    )


async def _finish(
    ctx: Ctx, req: TemplateRequest, row: Row, steps: tuple[str, ...]
) -> TemplateResult:
    """Convert sand's VM into the template (it has never run: cloud-init first runs in each
    clone, so every clone gets its own machine id, host keys and user)."""
    vmid, node = int(row["vmid"]), str(row.get("node") or req.node)
    await vmops.wait_unlocked(ctx, node, vmid, why="its creation is still running; re-run later")
    status = await vmops.read_status(ctx, node, vmid)
    if status.get("status") == "running":
        raise tr.refuse(
            ctx,
            f"VM {vmid} ({req.name}) is running: a template is made from a VM that never "
            "booted (stop it, or remove it and build again)",
        )
    await ctx.client.task(
        "POST",
        f"{vmops.vm_path(node, vmid)}/template",
        {},
        what=f"conversion of VM {vmid} to a template",
        timeout=ctx.timeouts.template,
    )
    config = await read_config(ctx, node, vmid)
    if str(config.get("template", "")) != "1":
        raise ProxmoxError(ctx.name, f"VM {vmid} is still not a template after its conversion")
    done = f"converted VM {vmid} to template {req.name!r}: VMs clone it with template: {req.name}"
    return TemplateResult(
        req.name, vmid, node, made=True, steps=(*steps, done), notes=(AGENT_NOTE,)
    )
