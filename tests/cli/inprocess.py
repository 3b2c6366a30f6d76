"""``sand ARGS`` run inside the test process: what ``python -m sand ARGS`` in a subprocess
gives (exit code, stdout, stderr), without a fresh interpreter's second of start-up.

The run sees what the subprocess would: its own argv, environment, working directory,
stdin, and file descriptors 0-2 on files of its own (so a program sand starts writes
where sand's own output goes). Whatever sand changes of the process's global state is
put back afterwards: the environment, the working directory, signal handlers, the
collector's thresholds, structlog's and the logging module's configuration, context
variables, the secrets registered with the redactor, the in-flight record an interrupt
reports. A test about the process itself
(signals, a terminal, exit by signal, two processes at once) keeps the subprocess: see
``tests/cli/helpers.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import sand

MAIN_PY = str(Path(sand.__file__).parent / "__main__.py")  # sys.argv[0] under `python -m sand`


def run_in_process(
    args: list[str], *, cwd: Path, env: Mapping[str, str], stdin: str | None
) -> subprocess.CompletedProcess[str]:
    """``sand ARGS`` in this process, as ``subprocess.run(..., capture_output=True,
    text=True)`` would report it."""
    from sand.cli.main import main

    with _streams(stdin) as (out, err):
        with _process_state(args, cwd, env):
            code = _exit_code(lambda: main(args))
            sys.stdout.flush()
            sys.stderr.flush()
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "sand", *args], code, _text(out), _text(err)
        )


def _exit_code(call: Any) -> int:
    """What the interpreter would exit with after ``call()``: its return, a SystemExit's
    code, or 1 with the traceback on stderr for anything else."""
    try:
        return int(contextvars.copy_context().run(call) or 0)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


def _text(file: BinaryIO) -> str:
    file.seek(0)
    return file.read().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _streams(stdin: str | None) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """Descriptors 0, 1 and 2 on temporary files (stdin holding ``stdin``), and
    ``sys.stdin``/``stdout``/``stderr`` on them, as a child's would be; all put back."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(3)]
        files[0].write((stdin or "").encode())
        files[0].seek(0)
        with _on_descriptors(files):
            yield files[1], files[2]


@contextlib.contextmanager
def _on_descriptors(files: list[BinaryIO]) -> Iterator[None]:
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    try:
        for fd, file in enumerate(files):
            os.dup2(file.fileno(), fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for fd, saved in enumerate(saved_fds):
            os.dup2(saved, fd)
            os.close(saved)


@contextlib.contextmanager
def _process_state(args: list[str], cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    """argv, environment, working directory, signal handlers, logging and sand's own
    process-wide records as a fresh ``python -m sand`` has them; restored afterwards."""
    import structlog

    from sand import logs, redaction, retrying
    from sand.cli import inflight

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_signals = _signal_handlers()
    saved_gc = gc.get_threshold()
    saved_structlog = structlog.get_config()
    saved_logging = _logging_state()
    saved_secrets = set(redaction._secrets)
    saved_logs = (logs._pending, retrying.retry_logger)
    logs._pending, retrying.retry_logger = None, None
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [MAIN_PY, *args]
    structlog.reset_defaults()
    inflight._current = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for sig, handler in saved_signals.items():
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        gc.set_threshold(*saved_gc)
        structlog.reset_defaults()
        structlog.configure(**saved_structlog)
        _restore_logging(saved_logging)
        logs._pending, retrying.retry_logger = saved_logs
        with redaction._lock:
            redaction._secrets.clear()
            redaction._secrets.update(saved_secrets)
        inflight._current = None


def _signal_handlers() -> dict[signal.Signals, Any]:
    handlers = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(ValueError, OSError):
            handlers[signal.Signals(sig)] = signal.getsignal(sig)
    return handlers


LoggingState = dict[str, tuple[int, list[logging.Handler], bool, bool]]


def _logging_state() -> LoggingState:
    loggers: dict[str, logging.Logger] = {"": logging.getLogger()}
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            loggers[name] = logger
    return {
        name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for name, lg in loggers.items()
    }


def _restore_logging(saved: LoggingState) -> None:
    for name, (level, handlers, propagate, disabled) in saved.items():
        logger = logging.getLogger(name or None)
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate, logger.disabled = propagate, disabled
    for name, logger in logging.Logger.manager.loggerDict.items():
        if name not in saved and isinstance(logger, logging.Logger):
            logger.handlers.clear()  # a logger the run made: nothing of it outlives it
