"""Logging (structlog): human console by default, JSON for CI, always redacted
and inert (no event can carry a terminal control sequence, see sand.terminal).

structlog is imported only when something logs: ``configure`` notes the settings and
the first logger applies them, so a command that never logs (`sand validate`, a
no-op `sand plan`) never loads it. It is imported with rich out
of its sight: structlog otherwise imports rich's traceback and pretty-printer at its
own import when rich is installed (tens of milliseconds of every `sand plan`), and
sand renders exceptions as plain tracebacks anyway.
"""

from __future__ import annotations

import importlib.abc
import logging
import os
import sys
from typing import Any, TextIO

from sand import retrying
from sand.redaction import REDACTED, redact, redaction_processor, register_secret
from sand.terminal import inert_processor

__all__ = ["REDACTED", "configure", "get_logger", "redact", "register_secret"]


class _NoRich(importlib.abc.MetaPathFinder):
    """Refuses ``rich`` while structlog is first imported."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "rich" or name.startswith("rich."):
            raise ImportError(f"{name} is not loaded for structlog")


# The settings ``configure`` was given, applied by the first logger asked for.
_pending: tuple[str, str, TextIO | None] | None = None


def _structlog() -> Any:
    # here, not at the top: structlog loads only when something logs, with rich hidden
    global _pending
    if "structlog" not in sys.modules and "rich" not in sys.modules:
        hide = _NoRich()
        sys.meta_path.insert(0, hide)
        try:
            import structlog
        finally:
            sys.meta_path.remove(hide)
    import structlog

    if _pending is not None:
        (fmt, level, stream), _pending = _pending, None
        # Without a stream of its own, the stderr of the moment the first logger is
        # asked for: the one at configure time may have been replaced (and closed) since.
        _apply(structlog, fmt, level, stream or sys.stderr)
    return structlog


def configure(fmt: str = "console", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog once per process: console (human) or json (CI). Applied when
    the first logger is asked for (structlog is not loaded before)."""
    global _pending
    _pending = (fmt, level, stream)
    # Retries are told to a logger once logging is set up (sand.retrying sits below us).
    retrying.retry_logger = get_logger


def _apply(structlog: Any, fmt: str, level: str, out: TextIO) -> None:
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty() and _colour_ok(),
            exception_formatter=structlog.dev.plain_traceback,
        )
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
        logger_factory=structlog.PrintLoggerFactory(_ReaderMayLeave(out)),
        cache_logger_on_first_use=False,
    )


def reader_left(stream: TextIO) -> None:
    """The reader of ``stream`` left (``sand apply 2>&1 | head``): its file descriptor is
    pointed at /dev/null, as the Python docs advise for a broken pipe, so that what is
    still written, and the interpreter's own last flush at exit, go nowhere instead of
    failing (a failed flush at exit makes Python exit 120, whatever the command's code)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):  # no real file behind it (a test's capture)
        pass


class _ReaderMayLeave:
    """The log's stream: a reader that left stops the logging, never the run (the
    progress views do the same, ``sand.cli.inflight``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> None:
        try:
            self.out.write(text)
        except BrokenPipeError:
            reader_left(self.out)

    def flush(self) -> None:
        try:
            self.out.flush()
        except BrokenPipeError:
            reader_left(self.out)


def _colour_ok() -> bool:
    return not os.environ.get("NO_COLOR")  # no-color.org: set and not empty


def lifecycle_logger() -> Any:
    """A logger that --log-level does not filter below info: each run's start and
    finish events (``--log-format json``) are for pipelines, always there."""
    structlog = _structlog()

    return structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    ).bind(logger="sand.cli")


def get_logger(name: str = "sand") -> Any:
    structlog = _structlog()

    return structlog.get_logger(name)
