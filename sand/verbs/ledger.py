"""The landing ledger: what ``sand land`` moved to the host, one JSON line per fact.

It lives at ``project_dir(project)/landing.jsonl``, 0600 in sand's 0700 state
dir, and only ever holds metadata: the VM, the checkout's path and branch, the
GitHub repository, the compare URL and the PR's number, state and URL. It is
append-only (each record is one ``write`` on an ``O_APPEND`` descriptor, so
concurrent runs interleave whole lines) and never holds a remote URL as the
guest wrote it, which could carry a token.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sand.errors import StateError
from sand.state.paths import project_dir

LEDGER_FILE = "landing.jsonl"
SCHEMA = 1


def ledger_path(project: str) -> Path:
    return project_dir(project) / LEDGER_FILE


def append(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    lines = [
        json.dumps({"v": SCHEMA, "ts": _now(), **rec}, sort_keys=True) + "\n" for rec in records
    ]
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"the landing ledger {path} is not a regular file")
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)  # made by hand or by an older run: keep it private
        for line in lines:
            os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: Path) -> list[dict[str, Any]]:
    """Every record, oldest first; a torn or foreign line is skipped, not fatal."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("v") == SCHEMA:
            out.append(rec)
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
