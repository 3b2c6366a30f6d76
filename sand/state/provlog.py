"""Each VM's last provisioning log: what the guest's steps changed, or how they failed.

Written after every provisioning run or secrets delivery (``provision-log.json``,
0600 in the project's state dir), one entry per VM, replaced each time; ``sand ui``
shows the selected VM's. The lines come from the provisioner's own report (step
names, change lines that name paths and packages, the failing step's tail), which
never carries a value on purpose; they are redacted and made inert again here, as
``last-apply.json`` is, so a file from an older sand or a hand edit is not replayed
onto a terminal either.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sand.errors import StateError
from sand.redaction import redact
from sand.state.paths import project_dir
from sand.state.private import read_private, write_private_file
from sand.terminal import inert

MAX_LINES = 200  # a whole apt run is not a log a board can show; its tail is


def _path(project: str) -> Path:
    return project_dir(project) / "provision-log.json"


def _clean(line: str) -> str:
    return redact(inert(str(line))).rstrip()


def _load(project: str) -> dict[str, Any]:
    try:
        data = json.loads(read_private(_path(project)))
    except (OSError, ValueError, StateError):  # none kept yet, or not readable: no log
        return {}
    return data if isinstance(data, dict) else {}


def record_provision_log(project: str, vm: str, what: str, ok: bool, lines: Sequence[str]) -> None:
    """Replace ``vm``'s log: ``what`` ran ("provision", "deliver secrets"), ``ok`` or not."""
    logs = _load(project)
    logs[vm] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "what": what,
        "ok": ok,
        "lines": [_clean(line) for line in lines][-MAX_LINES:],
    }
    write_private_file(_path(project), json.dumps(logs, indent=2, sort_keys=True).encode())


def forget_provision_logs(project: str, vms: Iterable[str]) -> None:
    """Drop the logs of ``vms`` (deleted by sand: nothing of theirs stays on the host)."""
    logs = _load(project)
    drop = [vm for vm in vms if vm in logs]
    for vm in drop:
        del logs[vm]
    if drop:
        write_private_file(_path(project), json.dumps(logs, indent=2, sort_keys=True).encode())


def load_provision_log(project: str, vm: str) -> list[str]:
    """``vm``'s last log as lines, headed by when and what ran; [] when none is kept."""
    entry = _load(project).get(vm)
    if not isinstance(entry, dict):
        return []
    verdict = "ok" if entry.get("ok") else "failed"
    head = f"{entry.get('at', '?')} {entry.get('what', 'provision')}: {verdict}"
    lines = entry.get("lines")
    body = [str(x) for x in lines] if isinstance(lines, list) else []
    return [_clean(head), *(_clean(x) for x in body[-MAX_LINES:])]
