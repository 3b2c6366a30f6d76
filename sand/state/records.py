"""Per-VM outcome of the last apply (time, action, error), for `sand status`.

Errors are stored redacted; values never reach this file in the first place.
An error often quotes a guest, so it is stored inert (no terminal control
sequence) and made inert again when read: a file poisoned by an older sand
or by hand is not replayed by every `sand status`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from sand.logs import redact
from sand.state.paths import project_dir
from sand.state.private import read_private, write_private_file
from sand.terminal import inert, inert_value


class VMOutcome(Protocol):
    """One VM's result as the engine reports it (``sand.apply.engine.VMResult``)."""

    vm: str
    backend: str
    action: str
    ok: bool
    layer: str
    error: str
    seconds: float


def _path(project: str) -> Path:
    return project_dir(project) / "last-apply.json"


def load_records(project: str) -> dict[str, Any]:
    try:
        data = json.loads(read_private(_path(project)))
    except (OSError, ValueError):
        return {}
    return inert_value(data) if isinstance(data, dict) else {}


def record_results(project: str, results: Iterable[VMOutcome]) -> None:
    records = load_records(project)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in results:
        records[r.vm] = {
            "backend": r.backend,
            "action": r.action,
            "ok": r.ok,
            "layer": r.layer,
            "error": redact(inert(r.error)),
            "at": now,
            "seconds": round(r.seconds, 3),
        }
    write_private_file(_path(project), json.dumps(records, indent=2, sort_keys=True).encode())


def forget_records(project: str, gone: Iterable[tuple[str, str]]) -> None:
    """Drop the results of the VMs ``gone`` ((backend, name): deleted by sand)."""
    records = load_records(project)
    drop = [vm for backend, vm in gone if (records.get(vm) or {}).get("backend") == backend]
    for vm in drop:
        del records[vm]
    if drop:
        write_private_file(_path(project), json.dumps(records, indent=2, sort_keys=True).encode())
