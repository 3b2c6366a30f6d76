"""Logging (structlog) with a redaction processor.

Every resolved secret value is registered here the moment it is read; the
processor then replaces it wherever it appears in an event (message, keys,
nested values, exception text) before anything is rendered. Redaction is a
safety net: code still never logs values on purpose.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

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


def configure(fmt: str = "console", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog once per process: console (human) or json (CI)."""
    out = stream or sys.stderr
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty() and _colour_ok())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redaction_processor,  # last before rendering: sees every final string
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def _colour_ok() -> bool:
    import os

    return "NO_COLOR" not in os.environ


def get_logger(name: str = "sand") -> Any:
    return structlog.get_logger(name)
