"""Byte sizes as people write them (``8GiB``, ``512MiB``, ``40G``) to exact integers.

Decimal suffixes (``G``, ``GB``) are read as binary: that is what Lima and
Proxmox both do with ``8G``, and a manifest that says 8G on both backends must
mean the same machine.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}

SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTkmgt]i?[Bb]?|[Bb])?\s*$"
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: object) -> int:
    """Return the size in bytes; raise ``ValueError`` with a readable message."""
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '8GiB'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    if not isinstance(value, str):
        raise ValueError("a size must be a number of bytes or a string like '8GiB'")
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{value!r} is not a size; write it like '8GiB', '512MiB' or '40G'")
    number, unit = match.groups()
    size = int(float(number) * _UNITS[unit.lower()])
    if size <= 0:
        raise ValueError("a size must be positive")
    return size


def format_size(size: int) -> str:
    """The shortest exact binary form: 8589934592 → '8GiB'."""
    for suffix, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return f"{size}B"
