"""One listing for many callers that each need one sent after they asked.

The duplicate check after a clone needs a listing fresher than its own clone. When
clones end together (a wave of them), each asking for its own would cost one
whole-cluster listing per VM; instead the callers that ask while a listing is under
way share the next one, sent when that one returns. Each still gets an answer whose
request left after it asked, so what it proves is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Fresh(Generic[T]):
    """``await fresh.get()``: the answer of a ``fetch`` that started after the call."""

    def __init__(self, fetch: Callable[[], Awaitable[T]]) -> None:
        self._fetch = fetch
        self._running: asyncio.Future[T] | None = None
        self._next: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._fetch())
            return await asyncio.shield(self._running)
        if self._next is None:
            self._next = asyncio.ensure_future(self._after(self._running))
        return await asyncio.shield(self._next)

    async def _after(self, running: asyncio.Future[T]) -> T:
        with contextlib.suppress(BaseException):
            await running  # its callers hear how it ended; this one only waits
        self._next = None
        self._running = asyncio.ensure_future(self._fetch())
        return await self._running
