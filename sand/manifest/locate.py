"""Point at the manifest line a VM's effective value came from.

A VM's ``memory`` may be written on the VM, in ``defaults``, or (for a Proxmox
image, the backend's ``template``) in its backend block. When a backend refuses
a value at plan time, the person must be sent to the line that set it, not to
the VM in general — this is that lookup.
"""

from __future__ import annotations

from typing import Any

from sand.manifest.loader import LoadedManifest
from sand.manifest.pools import SPARE_INFIX
from sand.manifest.yamlmarks import Path


def vm_field_location(
    loaded: LoadedManifest,
    vm: str,
    field: str,
    *,
    backend_field: str | None = None,
    use_defaults: bool = True,
) -> str:
    """``FILE:LINE:COL`` of what set ``field`` for VM ``vm``.

    Looked up in order: the VM's own key, its warm pool's, ``defaults``, then
    ``backend_field`` of the VM's backend (e.g. ``template`` for an image), then the VM
    entry itself. A pool's spare (no entry of its own) is its pool's entry.
    """
    data = _data(loaded)
    raw = data.get("vms")
    vms: list[Any] = raw if isinstance(raw, list) else []
    index = next(
        (i for i, v in enumerate(vms) if isinstance(v, dict) and v.get("name") == vm), None
    )
    pools = _dict(data.get("pools"))
    spare_of = vm.rpartition(SPARE_INFIX)[0] if SPARE_INFIX in vm else ""
    if index is None and spare_of not in pools:
        return _where(loaded, ())
    entry = _dict(vms[index]) if index is not None else {"pool": spare_of}
    pool = entry.get("pool")
    candidates: list[Path] = [("vms", index, field)] if index is not None else []
    if isinstance(pool, str) and pool in pools:
        candidates.append(("pools", pool, field))
    if use_defaults:
        candidates.append(("defaults", field))
    if backend_field:
        backend = (
            entry.get("backend")
            or (_dict(pools.get(pool)).get("backend") if isinstance(pool, str) else None)
            or _dict(data.get("defaults")).get("backend")
        )
        if backend is None and len(_dict(data.get("backends"))) == 1:
            backend = next(iter(_dict(data.get("backends"))))
        if isinstance(backend, str):
            candidates.append(("backends", backend, backend_field))
    for path in candidates:
        if _present(data, path):
            return _where(loaded, path)
    return _where(loaded, ("vms", index) if index is not None else ("pools", spare_of))


def backend_field_location(loaded: LoadedManifest, backend: str, field: str) -> str:
    """``FILE:LINE:COL`` of ``backends.<backend>.<field>`` (else of the backend block)."""
    data = _data(loaded)
    path: Path = ("backends", backend, field)
    if not _present(data, path):
        path = ("backends", backend)
    return _where(loaded, path)


def _data(loaded: LoadedManifest) -> dict[str, Any]:
    return _dict(loaded.marks.data if loaded.marks is not None else None)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _present(data: Any, path: Path) -> bool:
    node = data
    for part in path:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_dict or in_list):
            return False
        node = node[part]
    return True


def _where(loaded: LoadedManifest, path: Path) -> str:
    if loaded.marks is None:
        return f"{loaded.path}:1:1"
    mark = loaded.marks.mark_for(path)
    return f"{loaded.path}:{mark.line}:{mark.column}"
