"""How apply shows progress: a live line per VM on a terminal (rich), plain
timestamped lines otherwise, JSON events with ``--log-format json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from sand.apply.engine import Progress
from sand.redaction import redact


@contextmanager
def progress_reporter(mode: str, stream: TextIO | None = None) -> Iterator[Progress]:
    """``mode``: "auto" (live on a TTY, else lines), "lines", "json" or "quiet"."""
    out = stream or sys.stderr
    if mode == "auto":
        mode = "live" if out.isatty() else "lines"
    if mode == "quiet":
        yield lambda vm, step: None
    elif mode == "json":
        from sand.logs import get_logger

        log = get_logger("sand.progress")
        yield lambda vm, step: log.info("progress", vm=vm, step=redact(step))
    elif mode == "live":
        with _live(out) as say:
            yield say
    else:

        def say(vm: str, step: str) -> None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            print(f"{stamp} {vm}: {redact(step)}", file=out, flush=True)

        yield say


@contextmanager
def _live(out: TextIO) -> Iterator[Progress]:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    steps: dict[str, tuple[str, float]] = {}
    started = time.monotonic()

    def table() -> Any:
        grid = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for vm, (step, since) in steps.items():
            done = step == "done" or step.startswith("failed")
            mark = "[green]✓[/]" if step == "done" else "[red]✗[/]" if done else "[yellow]…[/]"
            grid.add_row(mark, vm, step, f"{now - since:5.1f}s")
        grid.add_row("", "", "", f"total {now - started:5.1f}s")
        return grid

    console = Console(file=out)
    with Live(table(), console=console, refresh_per_second=8, transient=False) as live:

        def say(vm: str, step: str) -> None:
            steps[vm] = (redact(step), time.monotonic())
            live.update(table())

        yield say
