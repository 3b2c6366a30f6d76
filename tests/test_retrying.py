"""Retries: a call that succeeds at once costs no retry machinery (tenacity is not even
imported: ~7 ms of every plan); one that fails for a passing reason is tried again, the
first failure counted as the first attempt, until the attempts or the deadline end."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

from sand.retrying import Backoff, retry_async

PROBE = """
import asyncio, sys
from sand.retrying import Backoff, retry_async

async def ok():
    return 1

print(asyncio.run(retry_async(ok, backoff=Backoff(), retryable=lambda e: True,
                              layer="test", reason=str)))
print("tenacity" in sys.modules)
"""


def test_a_call_that_succeeds_at_once_loads_no_retry_machinery() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["1", "False"]


class Flaky(Exception):
    pass


def failing(times: int) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise Flaky(f"failure {len(calls)}")
        return "done"

    return calls, call


FAST = {"initial": 0.001, "factor": 2.0, "cap": 0.002}


async def test_a_passing_failure_is_tried_again_until_it_succeeds() -> None:
    calls, call = failing(2)
    result = await retry_async(
        call,
        backoff=Backoff(attempts=4, **FAST),
        retryable=lambda e: isinstance(e, Flaky),
        layer="test",
        reason=str,
    )
    assert result == "done" and len(calls) == 3


async def test_the_attempts_count_the_first_one() -> None:
    calls, call = failing(10)
    with pytest.raises(Flaky, match="failure 3"):
        await retry_async(
            call,
            backoff=Backoff(attempts=3, **FAST),
            retryable=lambda e: isinstance(e, Flaky),
            layer="test",
            reason=str,
        )
    assert len(calls) == 3


async def test_a_lasting_failure_is_not_tried_again() -> None:
    calls, call = failing(10)
    with pytest.raises(Flaky, match="failure 1"):
        await retry_async(
            call,
            backoff=Backoff(attempts=5, **FAST),
            retryable=lambda e: False,
            layer="test",
            reason=str,
        )
    assert len(calls) == 1


async def test_a_deadline_spent_by_the_first_attempt_allows_no_retry() -> None:
    calls: list[int] = []

    async def slow() -> None:
        calls.append(1)
        await asyncio.sleep(0.05)
        raise Flaky("slow failure")

    with pytest.raises(Flaky):
        await retry_async(
            slow,
            backoff=Backoff(attempts=None, deadline=0.02, **FAST),
            retryable=lambda e: isinstance(e, Flaky),
            layer="test",
            reason=str,
        )
    assert len(calls) == 1
