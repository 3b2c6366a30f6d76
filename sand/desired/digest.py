"""The one digest of sand's fingerprints: a stable short hash of JSON-able data."""

from __future__ import annotations

import hashlib
import json

# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)`` uses,
# made once: given options, ``json.dumps`` builds a new encoder at every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def digest(value: object, length: int = 16) -> str:
    """Stable short hash of JSON-able data (sorted keys, no whitespace)."""
    return hashlib.sha256(_CANONICAL.encode(value).encode()).hexdigest()[:length]
