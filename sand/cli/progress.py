"""Views of the engine's events: a live line per VM on a terminal (rich), plain
timestamped lines otherwise, structured log events with ``--log-format json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from sand.apply.events import Hooks, NoHooks, Phase, StepEvent
from sand.redaction import redact


class LineView:
    """One timestamped line per step: for logs, CI and pipes."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def on_step(self, event: StepEvent) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(event.at))
        print(f"{stamp} {event.vm}: {redact(event.text)}", file=self.out, flush=True)


class LogView:
    """Each step as a structured log event (``--log-format json`` puts them on stderr)."""

    def __init__(self) -> None:
        from sand.logs import get_logger

        self.log = get_logger("sand.progress")

    def on_step(self, event: StepEvent) -> None:
        self.log.info(
            "progress",
            vm=event.vm,
            backend=event.backend,
            phase=event.phase.value,
            step=redact(event.text),
            elapsed=round(event.elapsed, 3),
        )


@contextmanager
def progress_view(mode: str, stream: TextIO | None = None) -> Iterator[Hooks]:
    """``mode``: "auto" (live on a TTY, else lines), "live", "lines", "json" or "quiet"."""
    out = stream or sys.stderr
    if mode == "auto":
        mode = "live" if out.isatty() else "lines"
    if mode == "quiet":
        yield NoHooks()
    elif mode == "json":
        yield LogView()
    elif mode == "live":
        with _live(out) as view:
            yield view
    else:
        yield LineView(out)


class _LiveView:
    """Per VM: its current step and how long that step has taken; the clock keeps
    running between events (rich refreshes the table on its own)."""

    def __init__(self) -> None:
        self.steps: dict[str, tuple[StepEvent, float]] = {}
        self.started = time.monotonic()
        self.live: Any = None

    def on_step(self, event: StepEvent) -> None:
        self.steps[event.vm] = (event, time.monotonic())
        if self.live is not None:
            self.live.update(self)

    def __rich__(self) -> Any:
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for vm, (event, since) in self.steps.items():
            mark = {Phase.DONE: "[green]✓[/]", Phase.FAILED: "[red]✗[/]"}.get(
                event.phase, "[yellow]…[/]"
            )
            # A finished VM's clock stops at its last step.
            took = event.elapsed if event.phase.final else now - since
            grid.add_row(mark, vm, redact(event.text), f"{took:5.1f}s")
        grid.add_row("", "", "", f"total {now - self.started:5.1f}s")
        return grid


@contextmanager
def _live(out: TextIO) -> Iterator[_LiveView]:
    from rich.console import Console
    from rich.live import Live

    from sand.cli.apply import use_colour

    view = _LiveView()
    console = Console(file=out, no_color=not use_colour(out))  # NO_COLOR, --no-color
    with Live(view, console=console, refresh_per_second=8, transient=False) as live:
        view.live = live
        yield view
