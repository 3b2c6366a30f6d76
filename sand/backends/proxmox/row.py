"""What one row of PVE's listing (``/cluster/resources``) or a VM's config says, read
alike by every part of the backend: its power, when it booted, whether it is
protected or hibernated."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

Row = Mapping[str, Any]

# qemu-server's config lock while a VM is hibernated (its RAM in a state volume).
HIBERNATED_LOCK = "suspended"


def power_of(row: Row) -> str:
    status = str(row.get("status") or "")
    return status if status in ("running", "stopped") else "unknown"


def is_protected(config: Mapping[str, Any]) -> bool:
    return str(config.get("protection", "0")).lower() in ("1", "true", "yes", "on")


def booted_at(row: Row, now: float | None = None) -> float | None:
    """When a running VM started: the listing's ``uptime`` counts from its QEMU start."""
    uptime = as_int(row.get("uptime"))
    if power_of(row) != "running" or uptime is None or uptime < 0:
        return None
    return (time.time() if now is None else now) - uptime


def as_int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
