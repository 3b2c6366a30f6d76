"""The per-project inventory: every VM this host knows sand made, per backend.

Written by ``apply`` after each run (``inventory.json``, 0600 in the project's state
dir): (backend, name, identity, incarnation, node). A listing is checked against it,
so a VM that vanishes from a listing (a node out of quorum, a token that lost its
pool rights) is looked up by its id before anything new is made in its place.
Ids and names only, never secrets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from sand.observed import RecordedVM
from sand.state.paths import project_dir

FORMAT = 1


def inventory_path(project: str) -> str:
    return str(project_dir(project) / "inventory.json")


def load_inventory(project: str) -> list[RecordedVM]:
    try:
        with open(inventory_path(project), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return []
    out: list[RecordedVM] = []
    for item in data.get("vms") or []:
        if not isinstance(item, dict) or not item.get("backend") or not item.get("identity"):
            continue
        out.append(
            RecordedVM(
                backend=str(item["backend"]),
                name=str(item.get("name") or ""),
                identity=str(item["identity"]),
                incarnation=str(item.get("incarnation") or ""),
                node=str(item.get("node") or ""),
            )
        )
    return out


def save_inventory(project: str, records: Iterable[RecordedVM]) -> None:
    rows = sorted(
        {(r.backend, r.identity): r for r in records}.values(),
        key=lambda r: (r.backend, r.name, r.identity),
    )
    data = {
        "format": FORMAT,
        "vms": [
            {
                "backend": r.backend,
                "name": r.name,
                "identity": r.identity,
                "incarnation": r.incarnation,
                "node": r.node,
            }
            for r in rows
        ],
    }
    tmp = inventory_path(project) + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, inventory_path(project))
