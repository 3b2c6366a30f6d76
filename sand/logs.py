"""Logging (structlog): human console by default, JSON for CI, always redacted
and inert (no event can carry a terminal control sequence, see sand.terminal).

structlog (and rich behind its console renderer) is imported only when logging
is configured, which commands that never reach a backend skip: that keeps
`sand validate` fast.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

from sand.redaction import REDACTED, redact, redaction_processor, register_secret
from sand.terminal import inert_processor

__all__ = ["REDACTED", "configure", "get_logger", "redact", "register_secret"]


def configure(fmt: str = "console", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog once per process: console (human) or json (CI)."""
    # here, not at the top: importing it loads rich and structlog
    import structlog

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
            # Before redaction: a value split by escape sequences is whole only after it.
            inert_processor,
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
    return not os.environ.get("NO_COLOR")  # no-color.org: set and not empty


def lifecycle_logger() -> Any:
    """A logger that --log-level does not filter below info: each run's start and
    finish events (``--log-format json``) are for pipelines, always there."""
    # here, not at the top: importing it loads rich and structlog
    import structlog

    return structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    ).bind(logger="sand.cli")


def get_logger(name: str = "sand") -> Any:
    # here, not at the top: importing it loads rich and structlog
    import structlog

    return structlog.get_logger(name)
