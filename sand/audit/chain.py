"""One audit record as bytes: its fixed prefix, its hash, and the link to the one before.

A record is one line of JSON that always starts the same way::

    {"seq":N,"prev":"<sha256 of the line before, hex>","kind":"<kind>",...}

The fixed prefix lets ``verify`` walk a million records without parsing each one as
JSON (the line's hash covers every byte of it anyway, so a field changed anywhere
breaks the link its successor holds). A record's hash is the SHA-256 of its line
without the newline. The first record links to ``GENESIS``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

GENESIS = "0" * 64

# kinds are written into the prefix unescaped, so they are held to a plain alphabet
KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
PREFIX = re.compile(
    rb'\{"seq":(0|[1-9][0-9]{0,18}),"prev":"([0-9a-f]{64})","kind":"([a-z][a-z0-9_.-]{0,63})",'
)

# the kinds the log writes about itself
CHECKPOINT = "audit.checkpoint"
TORN = "audit.torn"


def encode(seq: int, prev: str, kind: str, body: dict[str, Any]) -> bytes:
    """The line (newline included) of record ``seq``; ``body`` holds every other field."""
    if not KIND.fullmatch(kind):
        raise ValueError(f"invalid audit record kind {kind!r}")
    rest = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    if rest == "{}":
        raise ValueError("an audit record needs at least one field besides its kind")
    return f'{{"seq":{seq},"prev":"{prev}","kind":"{kind}",{rest[1:]}\n'.encode()


def record_hash(line: bytes) -> str:
    """The hash of a record's line (with or without its newline)."""
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def decode(line: bytes) -> dict[str, Any] | None:
    """The record a line holds, or None when it is not one (torn, foreign, edited badly)."""
    if PREFIX.match(line) is None:
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None
