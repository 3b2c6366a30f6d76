"""Whether sand may attach the cloud-init drive a template lacks (preflight).

sand clones the template and, when the clone has no cloud-init drive, adds one with the
clone's config write (``ide2: <storage>:cloudinit``; PVE allocates
``vm-<vmid>-cloudinit`` and stores it as a CD-ROM). qemu-server's ``update_vm_api``
checks a cloud-init drive written there against ``VM.Config.Cloudinit`` *and*
``VM.Config.CDROM`` (``$check_drive_perms``, PVE 8 and 9 alike), and sand's role has no
``VM.Config.CDROM``: with such a template the write would be refused after the clone, a
VM half made. So preflight reads the template's config (once per template, only when a
VM is to be made from it and the token lacks the privilege; the clone reuses that read)
and refuses first, naming both fixes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sand.backends.protocol import PreflightItem, PreflightProblem
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import template_config
from sand.backends.proxmox.refusals import Permissions, holds
from sand.backends.proxmox.sources import parse_image, template_row

CDROM = "VM.Config.CDROM"
ATTACH = ("VM.Config.Cloudinit", CDROM)


def attach_problem(ref: str, vmid: object, storage: str, pool: str) -> str:
    return (
        f"template {ref!r} has no cloud-init drive, and attaching one to its clone takes "
        f"{CDROM} on /pool/{pool}, which the token lacks: add the drive to the template "
        f"(`qm set {vmid} --ide2 {storage}:cloudinit`) or grant {CDROM}"
    )


async def attach_problems(
    ctx: Ctx,
    items: Sequence[PreflightItem],
    rows: Sequence[Mapping[str, Any]],
    perms: Permissions | None,
) -> tuple[list[PreflightProblem], list[str]]:
    """Problems (and warnings) of the VMs to be cloned from a template without a
    cloud-init drive when the token may not attach one (``perms``: its
    ``/access/permissions``; None: not readable, nothing checked). VMs of a golden
    base are left out (the base's build machine, cloned from the plain template, is not
    a preflight item: its drive is added unchecked)."""
    pool_path = f"/pool/{ctx.config.pool}"
    if perms is None or all(holds(perms, pool_path, priv) for priv in ATTACH):
        return [], []
    problems: list[PreflightProblem] = []
    warnings: list[str] = []
    lacking: dict[str, str | None] = {}  # template ref -> the problem (None: it has one)
    for item in items:
        vm = item.vm
        if item.action not in ("create", "replace") or vm.fork is not None or vm.base:
            continue
        ref, storage = parse_image(vm.image, ctx.config.storage)
        if ref not in lacking:
            lacking[ref] = None
            row = template_row(list(rows), ref)
            if row is None or not row.get("template"):
                continue  # preflight names that problem
            try:
                config = await template_config(ctx, row)
            except ProxmoxError as e:
                warnings.append(f"preflight could not read template {ref!r}'s config: {e.detail}")
                continue
            if not vmops.has_cloudinit(config):
                lacking[ref] = attach_problem(ref, row.get("vmid"), storage, ctx.config.pool)
        why = lacking[ref]
        if why:
            problems.append(
                PreflightProblem(
                    vm.name, "image", why, backend_field="template", skip_defaults=True
                )
            )
    return problems, warnings


async def template_problem(
    ctx: Ctx, template: Mapping[str, Any], perms: Permissions, storage: str
) -> str | None:
    """``sand doctor``'s check of the template: the problem when it has no cloud-init drive
    and the token may not attach one (None otherwise, or when its config is unreadable)."""
    if all(holds(perms, f"/pool/{ctx.config.pool}", priv) for priv in ATTACH):
        return None
    try:
        config = await template_config(ctx, template)
    except ProxmoxError:
        return None  # the template's own findings say why it cannot be read
    if vmops.has_cloudinit(config):
        return None
    ref = str(template.get("name") or template.get("vmid"))
    return attach_problem(ref, template.get("vmid"), storage, ctx.config.pool)
