"""What the layers that touch the world say about the step they are in, while they are
in it: a step in a person's words, the limit of a bounded wait ("waiting for the guest
agent", up to 300 s), a retry ("PVE 503, retry 2/5 in 1.6s").

Backends, the guest transport and provisioning call :func:`step` and :func:`retrying`;
whoever runs the work (the apply engine, once per VM) listens with :func:`listening`.
The listener rides in a context variable, which asyncio copies into every task and
``asyncio.to_thread`` call started under it: a VM's words reach that VM's row and no
other's, and no signature between the engine and an HTTP request has to carry a
callback. Said outside any listener (``sand plan``, a test), they go nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """A failed try about to be made again."""

    layer: str  # who failed: proxmox, ssh, lima
    reason: str  # short, in the layer's words: "PVE 503", "connection refused"
    attempt: int  # the retry about to happen: 1 is the first retry
    attempts: int | None  # retries allowed at most; None: bounded by ``deadline`` instead
    delay: float  # seconds until it is made
    deadline: float | None = None  # seconds from the first try after which none is made

    @property
    def text(self) -> str:
        of = f"/{self.attempts}" if self.attempts else ""
        return f"{self.reason}, retry {self.attempt}{of} in {self.delay:.1f}s"


@dataclass(frozen=True)
class Activity:
    """One thing said: a new step (``text``, with its ``limit`` when the wait is
    bounded), or a retry within the step already under way (``retry``)."""

    text: str = ""
    limit: float | None = None  # seconds the step may take before it fails
    retry: Retry | None = None


Listener = Callable[[Activity], None]

_listener: ContextVar[Listener | None] = ContextVar("sand_activity", default=None)


def step(text: str, *, limit: float | None = None) -> None:
    """A step begins: ``text`` as a person reads it, ``limit`` its timeout in seconds."""
    _say(Activity(text, limit))


def reached() -> None:
    """The wait is over: no step is under way now (a verb connected, and its own work,
    which says nothing here, begins)."""
    _say(Activity())


def retrying(retry: Retry) -> None:
    """The step under way failed and will be tried again."""
    _say(Activity(retry=retry))


def _say(activity: Activity) -> None:
    listener = _listener.get()
    if listener is not None:
        listener(activity)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Hear what is said in this context (and the tasks and threads it starts)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
