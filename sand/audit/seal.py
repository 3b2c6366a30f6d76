"""Signed checkpoints: the host key vouching that record N hashes to H.

A checkpoint is a record of kind ``audit.checkpoint`` whose link (``prev``) is the
hash of the record before it and whose ``sig`` is an Ed25519 signature over
``sand-audit-checkpoint\\nseq N\\nhead H\\n``. The latest one is also kept in
``head.json`` beside the log (so cutting the log's end is found without an export) and
can be exported (``export.py``) to a place the host's user does not control alone.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sand.audit.chain import CHECKPOINT, encode
from sand.audit.keys import key_id, signing_key
from sand.state.private import read_private, write_private_file

HEAD_FILE = "head.json"


@dataclass(frozen=True)
class Claim:
    """Signed: record ``seq`` of the log hashes to ``head``."""

    seq: int
    head: str
    key: str
    sig: str
    at: str

    def message(self) -> bytes:
        return message(self.seq, self.head)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Claim:
        """ValueError when it is not a claim."""
        data = json.loads(text)
        fields = {"seq", "head", "key", "sig", "at"}
        if not isinstance(data, dict) or set(data) != fields:
            raise ValueError(f"not a checkpoint: fields {sorted(fields)} expected")
        if not isinstance(data["seq"], int) or not all(
            isinstance(data[f], str) for f in fields - {"seq"}
        ):
            raise ValueError("not a checkpoint: a field of the wrong type")
        return cls(**data)


def message(seq: int, head: str) -> bytes:
    return f"sand-audit-checkpoint\nseq {seq}\nhead {head}\n".encode()


def signed_by(claim: Claim, pub: Ed25519PublicKey) -> bool:
    try:
        pub.verify(base64.b64decode(claim.sig), claim.message())
    except (InvalidSignature, ValueError):
        return False
    return True


class Sealer:
    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key
        self.key_id = key_id(key.public_key())

    @classmethod
    def of_host(cls, directory: Path) -> Sealer:
        return cls(signing_key(directory))

    def sign(self, seq: int, head: str) -> Claim:
        sig = base64.b64encode(self.key.sign(message(seq, head))).decode()
        return Claim(seq, head, self.key_id, sig, _now())

    def checkpoint_line(self, claim: Claim) -> bytes:
        """The record carrying ``claim``: it follows record ``claim.seq`` and links to it."""
        return encode(claim.seq + 1, claim.head, CHECKPOINT, checkpoint_body(claim))


def checkpoint_body(claim: Claim) -> dict[str, Any]:
    # no time in it: every byte of the last checkpoint record is held by its signature
    # or by head.json, so an edit of it is found although no record links to it yet
    return {"key": claim.key, "sig": claim.sig}


def write_head(directory: Path, claim: Claim) -> None:
    write_private_file(directory / HEAD_FILE, claim.to_json().encode())


def read_head(directory: Path) -> Claim | None:
    """The latest checkpoint recorded beside the log; None when there is none yet.
    ValueError when the file is there but not a checkpoint."""
    try:
        return Claim.from_json(read_private(directory / HEAD_FILE))
    except FileNotFoundError:
        return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
