"""Where a hibernated VM's RAM goes, and whether it can go there (preflight).

qemu-server's ``vm_suspend`` with ``todisk`` saves the VM's RAM and device state to a
volume on the ``statestorage`` sand names: the backend's ``storage``, where the VM's
own disks are. It must exist on the VM's node, be active, hold VM images, and have
room for the RAM (the state volume is about the size of the VM's memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sand.manifest.sizes import format_size


def state_storage_problem(
    storage: str,
    node: str,
    storages: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    memory: int,
) -> str | None:
    """Why ``storage`` on ``node`` (``storages``: ``/cluster/resources`` rows by node and
    storage) cannot take the saved state of a VM with ``memory`` bytes of RAM; None when
    it can, or when the storages could not be read (preflight warned of that)."""
    if not storages:
        return None
    row = storages.get((node, storage))
    if row is None:
        return f"storage {storage!r} does not exist on node {node}"
    if row.get("status", "available") != "available":
        return f"storage {storage!r} is not active on node {node}"
    if "images" not in str(row.get("content", "images")).split(","):
        return f"storage {storage!r} does not hold VM images (content: {row.get('content')})"
    total, used = row.get("maxdisk"), row.get("disk")
    if isinstance(total, int) and isinstance(used, int) and total - used < memory:
        return (
            f"storage {storage!r} has {format_size(max(0, total - used))} free; the saved "
            f"RAM needs {format_size(memory)}"
        )
    return None
