"""Where a hibernated VM's RAM goes, and whether it can go there (preflight).

qemu-server's ``vm_suspend`` with ``todisk`` saves the VM's RAM and device state to a
volume on the ``statestorage`` sand names: the backend's ``storage``, where the VM's
own disks are. It must exist on the VM's node, be active, hold VM images, and have
room for the state volume, which ``PVE::QemuConfig::__snapshot_save_vmstate`` allocates
at twice the VM's memory plus 500 MiB (the live save copies RAM while the guest still
dirties it). The API checks ``VM.Config.Disk`` on the VM and
``Datastore.AllocateSpace`` on that storage before it starts (``PVE::API2::Qemu``
``vm_suspend``): a token without them is refused with 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.refusals import holds
from sand.backends.proxmox.units import MIB, memory_mib
from sand.manifest.sizes import format_size

DRIVER_STATE_MIB = 500  # qemu-server: "assume 500MB is enough to safe all driver state"


def state_volume_bytes(memory: int) -> int:
    """The state volume PVE allocates for a VM of ``memory`` bytes (held in MiB)."""
    return (2 * memory_mib(memory) + DRIVER_STATE_MIB) * MIB


def state_privilege_problem(perms: Mapping[str, Any] | None, pool: str, storage: str) -> str | None:
    """What the token lacks to hibernate a VM of the pool to ``storage`` (None: nothing,
    or its permissions were not readable)."""
    if perms is None:
        return None
    pool_path = f"/pool/{pool}"
    if not holds(perms, pool_path, "VM.Config.Disk"):
        return f"the token lacks VM.Config.Disk on {pool_path}, which a suspend to disk needs"
    if not holds(perms, f"/storage/{storage}", "Datastore.AllocateSpace", (pool_path,)):
        return (
            f"the token lacks Datastore.AllocateSpace on /storage/{storage}, where the "
            "suspended VM's state is written"
        )
    return None


def state_storage_problem(
    ctx: Ctx,
    node: str,
    storages: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    memory: int,
) -> str | None:
    """Why the backend's storage on ``node`` (``storages``: ``/cluster/resources`` rows by
    node and storage) cannot take the saved state of a VM with ``memory`` bytes of RAM,
    or the token may not hibernate it there; None when it can, or when the storages
    could not be read (preflight warned of that)."""
    storage = ctx.config.storage
    why = state_privilege_problem(ctx.permissions, ctx.config.pool, storage)
    if why or not storages:
        return why
    row = storages.get((node, storage))
    if row is None:
        return f"storage {storage!r} does not exist on node {node}"
    if row.get("status", "available") != "available":
        return f"storage {storage!r} is not active on node {node}"
    if "images" not in str(row.get("content", "images")).split(","):
        return f"storage {storage!r} does not hold VM images (content: {row.get('content')})"
    total, used, need = row.get("maxdisk"), row.get("disk"), state_volume_bytes(memory)
    if isinstance(total, int) and isinstance(used, int) and total - used < need:
        return (
            f"storage {storage!r} has {format_size(max(0, total - used))} free; the saved "
            f"state needs {format_size(need)} (twice the RAM and 500MiB)"
        )
    return None
