"""A PVE task as the client sees it: how often its status is asked for while it runs
(``PollPolicy``) and how it ended (``TaskResult``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class PollPolicy:
    """Task status polling: first look at once (many PVE tasks end within milliseconds),
    the next after ``initial``, then ``initial`` growing by ``factor`` to ``cap``.

    The defaults see a task's end about half a second after it (on average) at no more
    than one request a second per task once past its first half second: a long clone
    holds a clone slot, so each second it is seen late is a second the next clone waits.
    """

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 1.0

    def delays(self) -> Iterator[float]:
        """The pauses between one look and the next."""
        delay = self.initial
        while True:
            yield delay
            delay = min(self.cap, delay * self.factor)


@dataclass(frozen=True)
class TaskResult:
    upid: str
    exitstatus: str
    warnings: tuple[str, ...] = ()
