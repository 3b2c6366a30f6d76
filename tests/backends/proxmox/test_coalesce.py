"""Callers that ask for a fresh answer while one is under way share the next one, and
every caller's answer comes from a fetch that started after it asked."""

from __future__ import annotations

import asyncio

from sand.backends.proxmox.coalesce import Fresh


async def _settle() -> None:
    """Let every task scheduled so far run up to its next wait."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_callers_during_a_fetch_share_the_next_one_sent_after_they_asked() -> None:
    started: list[int] = []
    release: list[asyncio.Event] = []

    async def fetch() -> int:
        started.append(len(started))
        gate = asyncio.Event()
        release.append(gate)
        await gate.wait()
        return len(release) - 1

    fresh: Fresh[int] = Fresh(fetch)
    first = asyncio.ensure_future(fresh.get())
    await _settle()
    assert len(started) == 1
    later = [asyncio.ensure_future(fresh.get()) for _ in range(5)]
    await _settle()
    assert len(started) == 1  # nobody joins the fetch already under way
    release[0].set()
    assert await first == 0
    await _settle()
    assert len(started) == 2  # one fetch for the five, sent after the first returned
    release[1].set()
    assert await asyncio.gather(*later) == [1] * 5


async def test_a_failed_fetch_fails_its_callers_only() -> None:
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            raise RuntimeError("listing failed")
        return calls

    fresh: Fresh[int] = Fresh(fetch)
    first = asyncio.ensure_future(fresh.get())
    await _settle()
    second = asyncio.ensure_future(fresh.get())
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert isinstance(results[0], RuntimeError) and results[1] == 2
