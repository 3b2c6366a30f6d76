"""Where a template can be cloned to: PVE clones across nodes only from shared storage.

qemu-server's ``clone_vm`` dies "can't clone VM to node '…' (VM uses local storage)"
when ``target`` names another node and any volume of the template (its cloud-init
drive included) sits on a storage that is not shared, and "can't clone to non-shared
storage" when the clone's own storage is not. So a template on ``local-lvm`` can only
be cloned on its own node: preflight blocks a VM pinned elsewhere, and an unpinned VM
is placed on the template's node (the plan says so).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.observe import Row, template_config

# qemu-server's drive keys (PVE::QemuServer::Drive::is_valid_drivename).
DRIVE = re.compile(r"^(ide|sata|scsi|virtio)\d+$|^(efidisk0|tpmstate0)$")


def volume_storages(config: Mapping[str, Any]) -> list[str]:
    """The storages a config's drives live on, CD-ROMs with a volume included (as
    ``$check_storage_access_clone`` counts them); ``none`` and a host CD-ROM are not."""
    found: list[str] = []
    for key, value in config.items():
        if not DRIVE.match(key):
            continue
        volume = str(value).split(",", 1)[0]
        volume = volume.removeprefix("file=")
        if volume in ("none", "cdrom") or ":" not in volume or volume.startswith("/"):
            continue
        found.append(volume.split(":", 1)[0])
    return list(dict.fromkeys(found))


def not_shared(
    storages: Mapping[tuple[str, str], Mapping[str, Any]], node: str, names: Iterable[str]
) -> list[str]:
    """Those of ``names`` that are not shared, as node ``node`` lists them (a storage the
    listing does not show counts as not shared: PVE would refuse it too)."""
    out = []
    for name in names:
        row = storages.get((node, name))
        if row is None or str(row.get("shared", 0)) in ("0", "", "False", "false"):
            out.append(name)
    return out


async def template_storages(ctx: Ctx, template: Row) -> list[str]:
    """The storages of the template's volumes (one config read per template per batch)."""
    return volume_storages(await template_config(ctx, template))


def local_reason(template: Row, local: list[str]) -> str:
    return (
        f"template {template.get('name') or template['vmid']!r} is on node "
        f"{template.get('node')} with its disks on {', '.join(repr(s) for s in local)}, "
        "which is not shared storage"
    )


async def clone_node(ctx: Ctx, template: Row, node: str, storage: str) -> str:
    """The node to clone on: ``node``, unless the template cannot be cloned there from its
    own node (local storage) and the VM is free to go to the template's node."""
    tnode = str(template.get("node") or "")
    if not tnode or tnode == node or tnode not in ctx.config.placement_nodes:
        return node
    rows = await ctx.client.get("cluster/resources", type="storage") or []
    storages = {(str(r.get("node")), str(r.get("storage"))): r for r in rows if isinstance(r, dict)}
    names = [*await template_storages(ctx, template), storage]
    return tnode if not_shared(storages, tnode, names) else node
