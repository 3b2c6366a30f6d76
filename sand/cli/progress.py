"""Views of the engine's events.

- live: a line per VM on a terminal (rich): its step, that step's own clock and, for a
  bounded wait, its limit ("waiting for the guest agent  45s / 300s"), a retry with its
  countdown; the clocks run between events (rich redraws on its own thread).
- lines: one timestamped line per step, for logs, CI and pipes, and a "still ..." line
  for a step that has said nothing for a while, so a quiet minute is not mistaken for
  a hang (Terraform's "Still creating... [10s elapsed]").
- json: each event one JSON object on a line (``apply --json``; sand/schemas/apply.schema.json).
- log: each event a structured log event (``--log-format json`` puts them on stderr).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

from sand.apply.events import Hooks, NoHooks, Phase, StepEvent
from sand.logs import get_logger
from sand.redaction import redact

# Bumped only when a key is removed or changes meaning (sand/schemas/apply.schema.json).
APPLY_FORMAT_VERSION = "2"
HEARTBEAT = 10.0  # seconds a step may be quiet before the line view says it is still going


def event_record(event: StepEvent) -> dict[str, Any]:
    """An event as the JSON views print it (and sand/schemas/apply.schema.json describes)."""
    record: dict[str, Any] = {
        "vm": event.vm,
        "backend": event.backend,
        "phase": event.phase.value,
        "step": redact(event.text),
        "elapsed": round(event.elapsed, 3),
        "at": stamp(event.at, precise=True),
    }
    if event.limit is not None:
        record["limit"] = event.limit
    if event.layer:
        record["layer"] = event.layer
    if event.retry is not None:
        r = event.retry
        record["retry"] = {
            "layer": r.layer,
            "reason": redact(r.reason),
            "attempt": r.attempt,
            "attempts": r.attempts,
            "delay": round(r.delay, 3),
        }
    return record


def stamp(at: float, *, precise: bool = False) -> str:
    """Wall time: local and to the second for people, UTC to the millisecond for JSON."""
    if precise:
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


def clock(took: float, limit: float | None) -> str:
    """A step's clock: "12.3s", or against its limit "45s / 300s"."""
    if limit is None:
        return f"{took:5.1f}s"
    return f"{took:3.0f}s / {limit:.0f}s"


class LineBatch:
    """Lines for ``out`` written together: those given in one pass of the event loop
    (a cold apply's burst: every VM starting its first step) go out in one write and one
    flush at the end of that pass, not one each. A line given outside the event loop's
    thread (the heartbeat's) goes out at once, after any still waiting, in order."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.lines: list[str] = []
        # What a write at a pass's end raised (the reader left: a closed pipe), raised to
        # the next caller, as a write of its own would have been.
        self.failed: Exception | None = None

    def add(self, line: str) -> None:
        if self.failed is not None:
            raise self.failed
        with self.lock:
            self.lines.append(line)
            first = len(self.lines) == 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if first:
            loop.call_soon(self._flush_at_the_end_of_the_pass)

    def _flush_at_the_end_of_the_pass(self) -> None:
        # Called after the callbacks that were ready with the first line: the burst's end.
        try:
            self.flush()
        except (OSError, ValueError) as exc:
            self.failed = exc

    def flush(self) -> None:
        with self.lock:
            text, self.lines = "".join(self.lines), []
            if text:  # under the lock: two flushes must not swap their lines
                self.out.write(text)
                self.out.flush()


class LineView:
    """One timestamped line per event; a step quiet for ``heartbeat`` seconds gets a
    "still ..." line (from a thread of its own, so a blocked event loop shows too)."""

    def __init__(self, out: TextIO, *, heartbeat: float = HEARTBEAT) -> None:
        self.out = out
        self.batch = LineBatch(out)
        self.heartbeat = heartbeat
        self.lock = threading.Lock()
        # Per VM in progress: its last event, when its step began, when a line was last
        # printed for it.
        self.steps: dict[str, tuple[StepEvent, float, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_step(self, event: StepEvent) -> None:
        now = time.monotonic()
        with self.lock:
            if event.retry is not None:
                text = event.retry.text
            else:
                text = event.text + (f" (limit {event.limit:.0f}s)" if event.limit else "")
            self._print(event.at, event.vm, text)
            if event.phase.final:
                self.steps.pop(event.vm, None)
                return
            began = now
            if event.retry is not None and event.vm in self.steps:
                began = self.steps[event.vm][1]  # a retry is within the step under way
            self.steps[event.vm] = (event, began, now)

    def _print(self, at: float, vm: str, text: str) -> None:
        self.batch.add(f"{stamp(at)} {vm}: {redact(text)}\n")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="sand-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.batch.flush()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat / 4)):
            now = time.monotonic()
            with self.lock:
                for vm, (event, began, said) in list(self.steps.items()):
                    if now - said < self.heartbeat:
                        continue
                    took = now - began
                    of = f" of {event.limit:.0f}s" if event.limit else ""
                    try:
                        self._print(time.time(), vm, f"still {event.text} [{took:.0f}s{of}]")
                    except (BrokenPipeError, ValueError):  # the reader left, or closed
                        return
                    self.steps[vm] = (event, began, now)


class JsonLinesView:
    """Each event as one JSON object on a line: ``{"format_version", "type": "step" |
    "retry", ...}`` (the first and last lines of ``apply --json`` are its plan and its
    outcome, written by ``sand.cli.applying``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.batch = LineBatch(out)

    def on_step(self, event: StepEvent) -> None:
        kind = "retry" if event.retry is not None else "step"
        self.batch.add(json_line(kind, event_record(event)))


def json_line(kind: str, body: dict[str, Any]) -> str:
    line = {"format_version": APPLY_FORMAT_VERSION, "type": kind, **body}
    return json.dumps(line, default=str, separators=(",", ":")) + "\n"


def write_json_line(out: TextIO, kind: str, body: dict[str, Any]) -> None:
    out.write(json_line(kind, body))
    out.flush()


class LogView:
    """Each event as a structured log event (``--log-format json`` puts them on stderr)."""

    def __init__(self) -> None:

        self.log = get_logger("sand.progress")

    def on_step(self, event: StepEvent) -> None:
        record = event_record(event)
        del record["at"]  # the log line has its own timestamp
        self.log.info("retry" if event.retry is not None else "progress", **record)


@contextmanager
def progress_view(mode: str, stream: TextIO | None = None) -> Iterator[Hooks]:
    """``mode``: "auto" (live on a TTY, else lines), "live", "lines", "json" (JSON
    lines on stdout), "log" (structured log events) or "quiet"."""
    out = stream or sys.stderr
    if mode == "auto":
        # A dumb terminal cannot redraw: rich would show only the last frame, at the end.
        mode = "live" if out.isatty() and os.environ.get("TERM") != "dumb" else "lines"
    # What stdout holds (the plan) goes out before the first progress line on stderr.
    sys.stdout.flush()
    if mode == "quiet":
        yield NoHooks()
    elif mode == "json":
        json_lines = JsonLinesView(stream or sys.stdout)
        try:
            yield json_lines
        finally:
            json_lines.batch.flush()  # before the outcome's line
    elif mode == "log":
        yield LogView()
    elif mode == "live":
        with _live(out) as view:
            yield view
    else:
        lines = LineView(out)
        lines.start()
        try:
            yield lines
        finally:
            lines.stop()


class _LiveView:
    """Per VM: its current step, that step's clock (against its limit when it has one)
    and a retry counting down; the total at the bottom. The clocks keep running between
    events: rich redraws from its own thread, calling ``__rich__``."""

    def __init__(self) -> None:
        # Per VM: its last step event, when that step began, the retry under way and
        # when it was announced.
        self.steps: dict[str, tuple[StepEvent, float]] = {}
        self.retries: dict[str, tuple[StepEvent, float]] = {}
        self.started = time.monotonic()
        self.live: Any = None

    def on_step(self, event: StepEvent) -> None:
        now = time.monotonic()
        if event.retry is not None:
            self.retries[event.vm] = (event, now)
        else:
            self.retries.pop(event.vm, None)
            self.steps[event.vm] = (event, now)
        if self.live is not None:
            self.live.update(self)

    def __rich__(self) -> Any:
        # here, not at the top: importing it loads rich
        from rich.table import Table

        # here, not at the top: importing it loads rich
        from rich.text import Text

        grid = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for vm, (event, since) in list(self.steps.items()):
            mark = {Phase.DONE: "[green]✓[/]", Phase.FAILED: "[red]✗[/]"}.get(
                event.phase, "[yellow]…[/]"
            )
            # A finished VM's clock stops at its last step.
            took = event.elapsed if event.phase.final else now - since
            text = Text(redact(event.text))
            retry = self.retries.get(vm)
            if retry is not None and retry[0].retry is not None:
                r = retry[0].retry
                left = max(0.0, r.delay - (now - retry[1]))
                of = f"/{r.attempts}" if r.attempts else ""
                said = f" — {redact(r.reason)}, retry {r.attempt}{of} in {left:.1f}s"
                text.append(said, style="yellow")
            limit = None if event.phase.final else event.limit
            grid.add_row(mark, vm, text, clock(took, limit))
        grid.add_row("", "", "", f"total {now - self.started:5.1f}s")
        return grid


@contextmanager
def _live(out: TextIO) -> Iterator[_LiveView]:
    # here, not at the top: importing it loads rich
    from rich.console import Console

    # here, not at the top: importing it loads rich
    from rich.live import Live

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.cli.colour import use_colour

    view = _LiveView()
    console = Console(file=out, no_color=not use_colour(out))  # NO_COLOR, --no-color
    with Live(view, console=console, refresh_per_second=8, transient=False) as live:
        view.live = live
        yield view
