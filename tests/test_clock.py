"""sand's clock under SAND_TIME_SCALE: waits pass faster, and are still counted and named
in the world's seconds (the retry's words, a deadline's number of tries)."""

from __future__ import annotations

import asyncio

import pytest

from sand import clock
from sand.activity import Activity, listening
from sand.retrying import Backoff, retry_async


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(clock.SCALE_ENV, "0.001")
    # Retries are said to the log once sand.logs is set up; these are not about the log.
    monkeypatch.setattr("sand.retrying.retry_logger", None)


@pytest.mark.parametrize(("value", "scale"), [("", 1.0), ("0.01", 0.01), ("1", 1.0)])
def test_the_scale_is_read_from_the_environment(monkeypatch, value, scale) -> None:
    monkeypatch.setenv(clock.SCALE_ENV, value)
    assert clock.scale() == scale
    assert clock.real(15.0) == pytest.approx(15.0 * scale)


@pytest.mark.parametrize("value", ["0", "-1", "2", "fast", "nan"])
def test_a_scale_that_is_not_a_speed_up_is_ignored(monkeypatch, value) -> None:
    monkeypatch.setenv(clock.SCALE_ENV, value)
    assert clock.scale() == 1.0


def test_a_sleep_moves_the_clock_by_its_full_seconds(fast) -> None:
    start = clock.monotonic()
    asyncio.run(clock.sleep(30.0))
    assert clock.monotonic() - start >= 30.0


def failing(tries: list[int]):
    async def call() -> None:
        tries.append(1)
        raise ConnectionError("refused")

    return call


def test_retries_say_the_worlds_seconds_and_wait_them_on_the_clock(fast) -> None:
    heard: list[Activity] = []
    tries: list[int] = []
    start = clock.monotonic()
    with listening(heard.append), pytest.raises(ConnectionError):
        asyncio.run(
            retry_async(
                failing(tries),
                backoff=Backoff(attempts=4, initial=4.0, factor=2.0, cap=8.0),
                retryable=lambda e: isinstance(e, ConnectionError),
                layer="test",
                reason=str,
            )
        )
    delays = [a.retry.delay for a in heard if a.retry is not None]
    assert len(tries) == 4 and len(delays) == 3
    # Each wait is at least half its step (4, 8, 8 s), in the words and on the clock.
    assert all(d >= low for d, low in zip(delays, (2.0, 4.0, 4.0), strict=True)), delays
    assert clock.monotonic() - start >= sum(delays)


def test_a_deadline_is_kept_on_the_clock(fast, monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 world seconds pass in 1 real second here, not 20 ms: a busy machine (the suite's
    # other workers) can hold a thread for tens of ms, which at 0.001 was past the deadline
    # before the third try. On tenacity's own clock it would still try a hundred times.
    monkeypatch.setenv(clock.SCALE_ENV, "0.05")
    tries: list[int] = []
    with pytest.raises(ConnectionError):
        asyncio.run(
            retry_async(
                failing(tries),
                backoff=Backoff(attempts=None, initial=2.0, cap=4.0, deadline=20.0),
                retryable=lambda e: isinstance(e, ConnectionError),
                layer="test",
                reason=str,
            )
        )
    # Waits of at least 1, 2, 2, ... world seconds fit a 20-second deadline at most 11
    # times; on tenacity's own clock (real seconds) it would try hundreds of times.
    assert 3 <= len(tries) <= 12
