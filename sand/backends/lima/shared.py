"""One per-name ``limactl list`` for the creates that end together.

After its start, each create reads its instance once (the SSH port Lima picked). A
wave of creates asked one listing each, of the same host, moments apart: the creates
that ask while such a read is under way now share the next one, sent when it returns,
naming all of them. Each still gets an answer whose call left after it asked, so what
it reads is as fresh as its own call would have been.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")
Fetch = Callable[[tuple[str, ...]], Awaitable[Mapping[str, T]]]


class SharedReads(Generic[T]):
    """``await reads.get(name)``: ``name``'s entry in a ``fetch`` that began after."""

    def __init__(self, fetch: Fetch[T]) -> None:
        self._fetch = fetch
        self._running: asyncio.Future[Mapping[str, T]] | None = None
        self._next: asyncio.Future[Mapping[str, T]] | None = None
        self._waiting: set[str] = set()

    async def get(self, name: str) -> T:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._fetch((name,)))
            return (await asyncio.shield(self._running))[name]
        self._waiting.add(name)
        if self._next is None:
            self._next = asyncio.ensure_future(self._after(self._running))
        return (await asyncio.shield(self._next))[name]

    async def _after(self, running: asyncio.Future[Mapping[str, T]]) -> Mapping[str, T]:
        with contextlib.suppress(BaseException):
            await running  # its callers hear how it ended; this one only waits
        names, self._waiting, self._next = tuple(sorted(self._waiting)), set(), None
        self._running = asyncio.ensure_future(self._fetch(names))
        return await self._running
