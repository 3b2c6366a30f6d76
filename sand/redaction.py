"""Redaction of resolved secret values from anything sand prints or stores.

Every resolved secret value is registered here the moment it is read; the
structlog processor then replaces it wherever it appears in an event
(message, keys, nested values, exception text) before anything is rendered.
This module is stdlib-only so that registering costs nothing at startup.
Redaction is a safety net: code still never logs values on purpose.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any

REDACTED = "[redacted]"
_MIN_SECRET_LEN = 4  # shorter values would redact ordinary words; such secrets are refused

_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(value: str) -> None:
    """Remember a resolved secret value so no log line can carry it."""
    if len(value) < _MIN_SECRET_LEN:
        return
    with _lock:
        _secrets.add(value)
        for line in value.splitlines():
            if len(line) >= _MIN_SECRET_LEN:
                _secrets.add(line.strip())


def redact(text: str) -> str:
    with _lock:
        values = sorted(_secrets, key=len, reverse=True)
    for value in values:
        if value and value in text:
            text = text.replace(value, REDACTED)
    return text


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(v) for v in value)
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    return value


def redaction_processor(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    return {key: _scrub(value) for key, value in event.items()}
