"""A VM's config as it runs now and as it will after its next start (PVE's pending).

A running VM's change that QEMU cannot take live (the CPU type, cores, memory without
hotplug) waits in the config's pending section until the VM starts again. ``GET
…/config`` answers with the pending values applied, so a change waiting for a reboot
would look converged; ``GET …/pending`` answers both, in one request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sand.backends.proxmox.context import Ctx

# What QEMU runs when a VM's config names no CPU type (qemu-server's default).
PVE_DEFAULT_CPU = "kvm64"


def cpu_type_of(config: Mapping[str, Any]) -> str:
    """The config's CPU type: ``cpu`` is ``[cputype=]<type>[,flags=...]``; flags are not
    sand's, so only the type is compared."""
    for part in str(config.get("cpu") or "").split(","):
        key, eq, value = part.partition("=")
        if not eq:
            return key.strip() or PVE_DEFAULT_CPU
        if key.strip() == "cputype":
            return value.strip() or PVE_DEFAULT_CPU
    return PVE_DEFAULT_CPU


async def read_pending(
    ctx: Ctx, node: str, vmid: str | int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(current config, pending changes) from one ``GET …/pending``: what the VM runs with
    now, and what PVE runs after its next start (a pending delete is None). ``GET
    …/config`` would give the pending values applied, with no sign they are not live."""
    current: dict[str, Any] = {}
    pending: dict[str, Any] = {}
    for item in await ctx.client.get(f"nodes/{node}/qemu/{vmid}/pending") or []:
        key = str(item.get("key"))
        if "value" in item:
            current[key] = item["value"]
        if "pending" in item:
            pending[key] = item["pending"]
        elif item.get("delete"):
            pending[key] = None
    return current, pending


def pending_fields(current: Mapping[str, Any], pending: Mapping[str, Any]) -> dict[str, object]:
    """sand's fields that a pending change will set at the next start."""
    out: dict[str, object] = {}
    if "cpu" in pending:
        out["cpu"] = cpu_type_of({"cpu": pending["cpu"] or ""})
    if "cores" in pending or "sockets" in pending:
        after = {**current, **pending}
        out["cpus"] = (_to_int(after.get("cores")) or 1) * (_to_int(after.get("sockets")) or 1)
    if pending.get("memory") is not None:
        mib = _to_int(str(pending["memory"]).split("=")[-1])  # "4096" or "current=4096"
        if mib:
            out["memory"] = mib << 20
    return out


def _to_int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
