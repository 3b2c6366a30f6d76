"""A host's audit log in a temporary state dir, and what a verifier elsewhere holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sand.audit import seal
from sand.audit.keys import SIGNING_PUB, parse_public
from sand.audit.log import LOG_FILE
from sand.audit.verify import Report, verify


def pinned_key(directory: Path) -> Ed25519PublicKey:
    return parse_public((directory / SIGNING_PUB).read_text())


def verify_host(directory: Path) -> Report:
    """What `sand audit verify` checks with nothing but the host's files."""
    head = seal.read_head(directory)
    return verify(directory / LOG_FILE, pinned_key(directory), [head] if head else [])


def audit_records(state_dir: Path) -> list[dict[str, Any]]:
    """Every record of the audit log in sand's state dir ``state_dir``, oldest first."""
    path = state_dir / "audit" / LOG_FILE
    return [json.loads(line) for line in path.read_bytes().splitlines()]
