"""What a verb (``sand shell``, ``land``, ``cp``, the board's ``s`` and ``l``) shows
while it waits to reach a VM: the step the layers below say (``sand.activity``: "waiting
for the guest agent to report an address", up to 300 s), with its own clock against its
limit, as an apply shows it.

A step that ends within ``QUIET`` seconds (an SSH connection, a listing) shows nothing,
so ``sand shell VM -- CMD`` in a script prints only the command's output; one that
lasts is shown: on a terminal one line redrawn in place and wiped when the wait ends,
elsewhere a timestamped line and a "still ..." line every ``HEARTBEAT`` seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TextIO

from sand import activity
from sand.activity import Activity
from sand.cli.progress import HEARTBEAT, clock, stamp
from sand.redaction import redact

QUIET = 2.0


class StepClock:
    """The step a wait is in, as last said, and when it began."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.text = ""
        self.limit: float | None = None
        self.began = time.monotonic()
        self.retry = ""
        self.steps = 0  # how many steps were said: a new one is announced again

    def heard(self, said: Activity) -> None:
        with self.lock:
            if said.retry is not None:
                self.retry = said.retry.text
                return
            self.text, self.limit, self.retry = said.text, said.limit, ""
            self.began = time.monotonic()
            self.steps += 1

    def lasted(self) -> float:
        return time.monotonic() - self.began

    def line(self, room: int | None = None) -> str:
        """ "waiting for the guest agent to report an address  45s / 300s"; in ``room``
        cells (a board's one status line), its words cut rather than its clock."""
        with self.lock:
            words = redact(self.text)
            tail = f"  {clock(self.lasted(), self.limit).strip()}"
            tail += f" — {redact(self.retry)}" if self.retry else ""
        if room is not None and len(words) + len(tail) > room:
            words = words[: max(8, room - len(tail) - 1)].rstrip() + "…"
        return words + tail


@contextmanager
def watched(tick: Callable[[StepClock], None], every: float = 0.25) -> Iterator[StepClock]:
    """Hear the steps said in this context (and the tasks and threads it starts), and
    call ``tick`` every ``every`` seconds with them until it ends, then once more."""
    steps = StepClock()
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            tick(steps)

    ticker = threading.Thread(target=run, name="sand-wait", daemon=True)
    ticker.start()
    try:
        with activity.listening(steps.heard):
            yield steps
    finally:
        stop.set()
        ticker.join()
        steps.heard(Activity())  # no step under way: a view clears what it drew
        tick(steps)


class _WaitLines:
    """A verb's wait on stderr: a line redrawn on a terminal, stamped lines elsewhere."""

    def __init__(self, vm: str, out: TextIO, quiet: float, heartbeat: float) -> None:
        self.vm, self.out, self.quiet, self.heartbeat = vm, out, quiet, heartbeat
        self.live = out.isatty() and os.environ.get("TERM") != "dumb"
        self.announced, self.said_at, self.drawn = 0, 0.0, False

    def __call__(self, steps: StepClock) -> None:
        try:
            self._show(steps)
            self.out.flush()
        except (OSError, ValueError):  # the reader left, or the stream closed
            pass

    def _show(self, steps: StepClock) -> None:
        if not steps.text or steps.lasted() < self.quiet:
            if self.drawn:  # the step ended (or the wait did): its line goes
                self.out.write("\r\x1b[K")
                self.drawn = False
            return
        if self.live:
            self.out.write(f"\r\x1b[K{self.vm}: {steps.line()}")
            self.drawn = True
        elif steps.steps != self.announced:
            of = f" (limit {steps.limit:.0f}s)" if steps.limit else ""
            self._say(f"{redact(steps.text)}{of}")
            self.announced = steps.steps
        elif time.monotonic() - self.said_at >= self.heartbeat:
            of = f" of {steps.limit:.0f}s" if steps.limit else ""
            self._say(f"still {redact(steps.text)} [{steps.lasted():.0f}s{of}]")

    def _say(self, text: str) -> None:
        print(f"{stamp(time.time())} {self.vm}: {text}", file=self.out)
        self.said_at = time.monotonic()


def shown_while_waiting(
    vm: str, out: TextIO | None = None, *, quiet: float = QUIET, heartbeat: float = HEARTBEAT
) -> AbstractContextManager[StepClock]:
    """Show on ``out`` (stderr) the steps a verb waits through, once one lasts."""
    return watched(_WaitLines(vm, out or sys.stderr, quiet, heartbeat))
