"""When an unattended loop (``apply --watch``, ``sand sync``) runs again: a save, a
tick, a webhook. Single-flight: one run at a time, and any number of wake-ups that
arrive during a run collapse into exactly one follow-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

PERIODIC = "periodic"


class Wakeups:
    """The reasons to run again, gathered until the loop takes them."""

    def __init__(self, stop: asyncio.Event, first: str) -> None:
        self.stop = stop
        self.reasons: list[str] = [first]
        self.wake = asyncio.Event()
        self.wake.set()

    def fire(self, reason: str) -> None:
        self.reasons.append(reason)
        self.wake.set()

    async def every(self, interval: float) -> None:
        """A ``periodic`` wake-up every ``interval`` seconds until stopped."""
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=interval)
            if not self.stop.is_set():
                self.fire(PERIODIC)

    async def serve(
        self,
        sources: Sequence[Coroutine[Any, Any, None]],
        run: Callable[[str], Awaitable[object]],
        pick: Callable[[list[str]], str],
    ) -> None:
        """Until stopped (or a source fails: its error propagates): ``sources`` fire
        wake-ups, and each wake-up runs ``run(pick(reasons gathered))``, one at a time."""

        async def loop() -> None:
            while not self.stop.is_set():
                await self.wake.wait()
                if self.stop.is_set():
                    break
                self.wake.clear()
                reason = pick(self.reasons)
                self.reasons.clear()
                await run(reason)

        tasks = [asyncio.create_task(c) for c in (*sources, loop())]
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        self.stop.set()
        self.wake.set()
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stopper.cancel()
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r
