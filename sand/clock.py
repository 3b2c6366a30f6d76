"""The clock sand's own waits run on: the real one, unless ``SAND_TIME_SCALE`` speeds it up.

Some waits are sand's patience with the world, not a person's choice: a guest agent
that has not reported an address yet, a retry's backoff, an SSH host or an API that
never answers. Each is counted, and named in every message, in the world's seconds
("no address from the guest agent after 15s"). ``SAND_TIME_SCALE`` (a factor in
(0, 1]; 1 when unset or not such a number) shrinks how long such a wait really lasts,
never what it is called: the test suite runs a 15-second wait in 0.15 s where the wait
is not what a test is about, and plan text, JSON and messages stay as they are.

Waits a person sets (``--lease-wait``, ``--interval``, a lease's ttl) and the time
shown on clocks (a step's elapsed time) stay on the real clock.
"""

from __future__ import annotations

import asyncio
import os
import time

SCALE_ENV = "SAND_TIME_SCALE"


def scale() -> float:
    """How much faster than real time sand's waits pass: ``SAND_TIME_SCALE``, else 1."""
    try:
        value = float(os.environ.get(SCALE_ENV, "") or 1.0)
    except ValueError:
        return 1.0
    return value if 0.0 < value <= 1.0 else 1.0


def real(seconds: float) -> float:
    """How long a wait of ``seconds`` (the world's) really lasts."""
    return seconds * scale()


def monotonic() -> float:
    """A monotonic clock in the world's seconds: deadlines of waits measured on it agree
    with :func:`sleep`. (Only differences between two readings mean anything.)"""
    return time.monotonic() / scale()


async def sleep(seconds: float) -> None:
    """Sleep ``seconds`` of the world's time."""
    await asyncio.sleep(real(seconds))
