"""``sand ui``: a live board of the fleet (``sand.cli.ui``, the one user of Textual).

The manifest is read first, outside the board: a bad one is the usual located error
and exit 1, before the terminal is taken over. The board then draws at once and
observes off the UI thread. Leaving it (q, Ctrl-C, or a crash Textual reports) gives
the terminal back as it was; an apply still running is stopped where it is, waited
for briefly, and what it left is said as ``sand apply``'s Ctrl-C says it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from sand import defaults
from sand.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from sand.cli.inflight import interrupted_message
from sand.cli.ui.app import Board
from sand.cli.ui.fleet import Fleet
from sand.cli.ui.observer import Observer
from sand.cli.ui.watching import BoardWatch
from sand.logs import configure
from sand.manifest import load_manifest
from sand.state.paths import project_dir
from sand.state.private import PRIVATE_FILE

# How long quitting waits for an apply it stopped to close its session and journal.
APPLY_GRACE = 30.0


def run(args: argparse.Namespace) -> int:
    manifest = Path(args.manifest)
    loaded = load_manifest(manifest)  # ManifestError: FILE:LINE:COL, exit 1, screen untouched
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "Error: sand ui needs a terminal; for a script, use sand status --json or sand plan",
            file=sys.stderr,
        )
        return EXIT_ERROR
    log = log_to_file(loaded.manifest.project, args.log_format, args.log_level)
    return run_board(manifest, interval=args.interval, watch=args.watch, log=log)


def log_to_file(project: str, fmt: str, level: str | None) -> Path:
    """The run's log lines go to ``ui.log`` in the project's state dir (0600, redacted
    as every log is): on stderr they would be written across the board."""
    path = project_dir(project) / "ui.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    configure(fmt, level or "info", stream=os.fdopen(fd, "a", encoding="utf-8", buffering=1))
    return path


def run_board(manifest: Path, *, interval: float, watch: bool, log: Path | None = None) -> int:
    watcher = None
    if watch:
        watcher = BoardWatch(
            manifest=manifest,
            interval=interval,
            debounce=defaults.DEBOUNCE,  # apply --watch's default
            parallelism=defaults.PARALLELISM,
            allow_mass_delete=False,
        )
    # Observations run in a child process: their work never shares the interpreter
    # lock with the keys (sand.cli.ui.observer).
    observer = Observer(manifest, log=log)
    board = Board(Fleet(manifest, observer=observer), interval=interval, watch=watcher)

    def terminate(_signum: int, _frame: object) -> None:
        # A SIGTERM, a SIGHUP (the SSH session dropped) or a SIGINT from outside (the
        # terminal's own Ctrl-C is a key here) ends the board as Ctrl-C does: the
        # terminal restored, an apply stopped where the journal can see it.
        board.call_later(board.leave, EXIT_INTERRUPTED)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, terminate)
    try:
        board.run()
    finally:
        if watcher is not None:
            watcher.stop()
        board.jobs.stop()
        observer.close()
        thread = board.jobs.apply_thread
        if thread is not None and thread.is_alive():
            thread.join(APPLY_GRACE)
    code = board.return_code if board.return_code is not None else board.exit_code
    if code == EXIT_INTERRUPTED or board.jobs.was_stopped_mid_apply:
        print(interrupted_message(), file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if code in (None, 0) else int(code)
