"""The records as ``sand audit log`` shows them: filtered by VM and time, oldest first.

Reading is not verifying: a line that is no record (a torn fragment, a hand edit) is
left out here and named by ``sand audit verify``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sand.audit.chain import decode
from sand.terminal import one_line

FORMAT_VERSION = "1"
_AGO = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str, now: datetime | None = None) -> str:
    """``--since``: a time (ISO 8601, UTC unless it says otherwise) or how long ago
    (``30m``, ``2h``, ``7d``), as the records' own ``ts`` format. ValueError else."""
    now = now or datetime.now(UTC)
    ago = _AGO.fullmatch(text.strip())
    if ago:
        when = now - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    else:
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"--since {text!r}: give a time (2026-12-06T14:00Z) or how long ago (30m, 2h, 7d)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def entries(
    path: Path, *, vm: str | None = None, since: str | None = None
) -> Iterator[dict[str, Any]]:
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            rec = decode(line)
            if rec is None:
                continue
            if vm is not None and rec.get("vm") != vm:
                continue
            # every ts is written in one format, UTC: their order is the strings' order
            if since is not None and str(rec.get("ts", "")) < since:
                continue
            yield rec


def last_entries(
    path: Path, vm: str, *, count: int = 5, project: str | None = None, window: int = 1 << 20
) -> list[dict[str, Any]]:
    """The last ``count`` records of ``vm`` (of ``project`` where a record names one)
    among the log's last ``window`` bytes: the board reads this on every redraw, so it
    never reads a large log whole."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - window))
            tail = fh.read()
    except FileNotFoundError:
        return []
    lines = tail.split(b"\n")
    if size > window:
        lines = lines[1:]  # the first is cut by the window
    found = []
    for line in reversed(lines):
        rec = decode(line)
        if rec is None or rec.get("vm") != vm:
            continue
        if project is not None and rec.get("project", project) != project:
            continue
        found.append(rec)
        if len(found) == count:
            break
    return found[::-1]


def describe(rec: dict[str, Any]) -> str:
    """One line: when, #seq, kind, the VM, who, then the other fields as key=value."""
    skip = {"seq", "prev", "kind", "ts", "user", "host", "pid", "version", "vm"}
    rest = " ".join(f"{k}={_short(v)}" for k, v in rec.items() if k not in skip)
    vm = f"  {_short(rec['vm'])}" if isinstance(rec.get("vm"), str) else ""
    who = f"{rec.get('user')}@{rec.get('host')}" if "user" in rec else ""
    return f"{rec.get('ts', '-')}  #{rec['seq']}  {rec['kind']}{vm}  {who}  {rest}".rstrip()


def _short(value: Any) -> str:
    # guest-made values (a branch name) reach a terminal here: made inert, one line
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return one_line(text, 80)
