"""Per-VM outcome of the last apply (time, action, error), for `sand status`.

Errors are stored redacted; values never reach this file in the first place.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from sand.logs import redact
from sand.state.paths import project_dir

if TYPE_CHECKING:
    from sand.apply.engine import ApplyResult


def _path(project: str) -> str:
    return str(project_dir(project) / "last-apply.json")


def load_records(project: str) -> dict[str, Any]:
    try:
        with open(_path(project), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_results(project: str, result: ApplyResult) -> None:
    records = load_records(project)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in result.results:
        records[r.vm] = {
            "backend": r.backend,
            "action": r.action.value,
            "ok": r.ok,
            "layer": r.layer,
            "error": redact(r.error),
            "at": now,
            "seconds": round(r.seconds, 3),
        }
    tmp = _path(project) + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(records, fh, indent=2, sort_keys=True)
    os.replace(tmp, _path(project))
