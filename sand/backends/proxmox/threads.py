"""The threads the Proxmox client's blocking requests run in, one per request in flight.

proxmoxer (requests) blocks, so each call runs in a thread. The event loop's default
pool has min(32, CPUs + 4) threads, 6 on a 2-core host: it held a wave of 10 creates
(``--parallelism``) to 6 requests at a time (a 20-VM wave against a PVE 200 ms away
took 4.8 s, against 3.5 s with a thread per create). The client has its own threads,
and requests keeps as many connections to the host (its pool holds 10 otherwise).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")

# Requests in flight to one PVE at once: above the default --parallelism (10), so a
# create's request never waits for a thread while another VM's task is polled.
REQUESTS_AT_ONCE = 16


class RequestThreads:
    """``await threads.run(fn, *args)``: ``asyncio.to_thread`` on threads of our own
    (the context carried along as to_thread does: a VM's activity reaches its row)."""

    def __init__(self, at_once: int = REQUESTS_AT_ONCE) -> None:
        self.at_once = at_once
        self._pool: ThreadPoolExecutor | None = None  # made by the first request

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads(), call)

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        """``fn`` started now, before any event loop runs (``PveClient.send_early``)."""
        return self._threads().submit(fn, *args)

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.at_once, thread_name_prefix="sand-pve")
        return self._pool

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
