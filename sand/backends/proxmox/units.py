"""Sizes as PVE writes them: memory in MiB, disk sizes with a G, M or K suffix; and
what a listing's sizes say of the desired ones (PVE rounds what sand set)."""

from __future__ import annotations

import re

MIB = 1 << 20
GIB = 1 << 30


def ceil_to(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def memory_mib(memory: int) -> int:
    """PVE's ``memory`` (MiB) for a size in bytes, rounded up."""
    return max(1, ceil_to(memory, MIB) // MIB)


def size_arg(size: int) -> str:
    """A size in bytes as PVE's disk-size syntax (G, M or K, exact or rounded up to K)."""
    for unit, suffix in ((GIB, "G"), (MIB, "M")):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return f"{ceil_to(size, 1024) // 1024}K"


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int | None:
    found = _SIZE.match(text.strip())
    if not found:
        return None
    return int(float(found[1]) * _UNITS[found[2]])


def observed_memory(maxmem: int | None, desired: int | None) -> int | None:
    """Report ``desired`` when PVE holds exactly what sand set for it (MiB rounding)."""
    if maxmem is None:
        return None
    if desired is not None and memory_mib(desired) * MIB == maxmem:
        return desired
    return maxmem


def observed_disk(maxdisk: int | None, desired: int | None) -> int | None:
    """Report ``desired`` when the disk is that size up to the storage's rounding (4 MiB)."""
    if maxdisk is None:
        return None
    if desired is not None and desired <= maxdisk < ceil_to(desired, 1024) + 4 * MIB:
        return desired
    return maxdisk
