"""Byte sizes as people write them (``8GiB``, ``512MiB``, ``40G``) to exact integers.

Decimal suffixes (``G``, ``GB``) are read as binary: that is what Lima and
Proxmox both do with ``8G``, and a manifest that says 8G on both backends must
mean the same machine.

A size must carry its unit: ``memory: 512`` is 512 MiB to someone who knows
Proxmox's ``memory`` option and 512 bytes to someone who knows Lima's, so a
bare number is refused rather than guessed at. Each field also has a range
(:func:`bounded`): a VM with 107 bytes of memory or an exabyte of disk is a
typo, and better refused at validate time than by the backend mid-apply.
Parsing knows P and E so that ``2EiB`` is reported as too large, not as
"not a size".
"""

from __future__ import annotations

import re
from collections.abc import Callable

_UNITS = {
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
    "p": 1 << 50,
    "pb": 1 << 50,
    "pib": 1 << 50,
    "e": 1 << 60,
    "eb": 1 << 60,
    "eib": 1 << 60,
}

# What the JSON Schema advertises: a number with a unit, nothing else.
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTPEkmgtpe]i?[Bb]?|[Bb])\s*$"
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_BARE_RE = re.compile(r"^\s*[0-9]+(\.[0-9]+)?\s*$")
# Longer than any size a machine can have; keeps exact arithmetic cheap.
_MAX_DIGITS = 40

MEMORY_RANGE = (64 << 20, 4 << 40)  # PVE's own minimum is 16 MiB; no useful agent VM has less
DISK_RANGE = (1 << 30, 64 << 40)


def parse_size(value: object, *, bounds: tuple[int, int] | None = None) -> int:
    """Return the size in bytes; raise ``ValueError`` with a readable message.

    ``bounds`` only words the error for a bare number: it suggests the unit
    that puts the number in range.
    """
    if isinstance(value, bool):
        raise ValueError("a size is written with a unit, like '8GiB' or '512MiB'")
    if isinstance(value, int | float) or (isinstance(value, str) and _BARE_RE.match(value)):
        raise ValueError(_bare_number(str(value).strip(), bounds))
    if not isinstance(value, str):
        raise ValueError("a size is written with a unit, like '8GiB' or '512MiB'")
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _UNITS or len(match.group(1)) > _MAX_DIGITS:
        raise ValueError(f"{value!r} is not a size; write it like '8GiB', '512MiB' or '40G'")
    number, unit = match.groups()
    size = _exact(number, _UNITS[unit.lower()])
    if size <= 0:
        raise ValueError("a size must be positive")
    return size


def _exact(number: str, factor: int) -> int:
    """``number`` (digits, maybe a fraction) times ``factor``, rounded down, exactly."""
    whole, _, fraction = number.partition(".")
    scale = 10 ** len(fraction)
    return int((int(whole) * scale + int(fraction or 0)) * factor // scale)


def _bare_number(text: str, bounds: tuple[int, int] | None) -> str:
    low, high = bounds or (1 << 20, 1 << 60)
    if len(text) <= _MAX_DIGITS:
        if text.isdigit() and low <= int(text) <= high and int(text) >= 1 << 20:
            # Most likely bytes, as Lima's own YAML and the PVE API take them.
            exact = format_size(int(text))
            choice = f"{text}B" if exact == f"{text}B" else f"{exact} or {text}B"
            return f"write {choice} (a bare number is ambiguous)"
        for unit in "MGT":
            if low <= _exact(text, _UNITS[unit.lower()]) <= high:
                break
        else:
            unit = "M"
    else:
        unit = "M"
    return f"write {text}{unit}iB or {text}{unit}B (a bare number is ambiguous)"


def bounded(field: str, low: int, high: int) -> Callable[[object], int]:
    """A validator: :func:`parse_size`, then ``low <= size <= high``."""

    def check(value: object) -> int:
        size = parse_size(value, bounds=(low, high))
        if not low <= size <= high:
            side = "small" if size < low else "large"
            raise ValueError(
                f"{str(value).strip()} is too {side}: {field} must be between "
                f"{format_size(low)} and {format_size(high)}"
            )
        return size

    return check


def format_size(size: int) -> str:
    """The shortest exact binary form: 8589934592 → '8GiB'."""
    for suffix, factor in (
        ("EiB", 1 << 60),
        ("PiB", 1 << 50),
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ):
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return f"{size}B"
