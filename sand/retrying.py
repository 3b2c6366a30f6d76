"""Trying again what failed for a passing reason: jittered exponential backoff.

The schedule and the loop are tenacity's; what is worth another try is sand's own rule,
given by each caller (a PVE 503 is, a 403 never; a refused SSH connection is while a
guest boots, a changed host key never). Every retry is said (``sand.activity``), so a
person watching an apply sees "PVE 503, retry 2/5 in 1.6s" instead of a frozen line.

The n-th retry waits a random time between half and all of
``min(cap, initial * factor ** (n - 1))`` ("equal jitter"): never less than half the
step, so a struggling server gets its breathing room, and spread, so the ten VMs of
one apply do not come back in the same instant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sand import clock
from sand.activity import Retry, retrying

if TYPE_CHECKING:
    import tenacity

T = TypeVar("T")

# Where retries are logged: set by sand.logs.configure (which sits above this module),
# None while logging is not set up (nothing is said then).
retry_logger: Callable[[str], Any] | None = None


@dataclass(frozen=True)
class Backoff:
    """How often and how patiently to try: ``attempts`` tries in all (the first
    included), or, with ``attempts=None``, until ``deadline`` seconds from the first
    try (no retry starts whose wait would end past it)."""

    attempts: int | None = 6
    initial: float = 0.5
    factor: float = 2.0
    cap: float = 8.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.attempts is None and self.deadline is None:
            raise ValueError("a backoff needs attempts or a deadline")

    def longest(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (1 is the first)."""
        return float(min(self.cap, self.initial * self.factor ** (retry - 1)))

    def _wait(self) -> tenacity.wait.wait_base:
        import tenacity

        half = {"multiplier": self.initial / 2, "exp_base": self.factor, "max": self.cap / 2}
        return tenacity.wait_exponential(**half) + tenacity.wait_random_exponential(**half)

    def _stop(self, started: float) -> tenacity.stop.stop_base:
        """``started``: :func:`clock.monotonic` when the first attempt began."""
        import tenacity

        stops: list[tenacity.stop.stop_base] = []
        if self.attempts is not None:
            stops.append(tenacity.stop_after_attempt(self.attempts))
        if self.deadline is not None:
            stops.append(_before_deadline(self.deadline, started))
        return tenacity.stop_any(*stops)


def _before_deadline(deadline: float, started: float) -> tenacity.stop.stop_base:
    """tenacity's ``stop_before_delay`` on sand's clock (tenacity's own reads
    time.monotonic), counted from ``started`` (the first try, made before tenacity's
    loop): no retry starts whose wait would end past the deadline. Made here, not at
    import: tenacity loads only for a retry."""
    import tenacity

    class BeforeDeadline(tenacity.stop.stop_base):
        def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
            upcoming = retry_state.upcoming_sleep or 0.0
            return clock.monotonic() - started + upcoming >= deadline

    return BeforeDeadline()


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    retryable: Callable[[BaseException], bool],
    layer: str,
    reason: Callable[[BaseException], str],
) -> T:
    """``call()`` until it succeeds, fails for good, or the backoff is spent; then its
    last exception propagates unchanged (the caller says what giving up means).
    ``reason`` turns a failure into the short words a retry is shown with."""
    started = clock.monotonic()
    try:
        # Most calls succeed at once: tenacity (~7 ms to import) loads for a retry only.
        return await call()
    except BaseException as exc:
        if backoff.attempts == 1 or not retryable(exc):
            raise
        first: list[BaseException] = [exc]
    import tenacity

    async def again() -> T:
        if first:  # tenacity's attempt 1 is the one that failed above: not sent again
            raise first.pop()
        return await call()

    retries = None if backoff.attempts is None else backoff.attempts - 1

    def announce(state: tenacity.RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        delay = state.upcoming_sleep
        said = reason(failure) if failure is not None else "failed"
        if retry_logger is not None:
            retry_logger("sand.retry").debug(
                "retry", layer=layer, reason=said, attempt=state.attempt_number, delay=delay
            )
        retrying(Retry(layer, said, state.attempt_number, retries, delay, backoff.deadline))

    async for attempt in tenacity.AsyncRetrying(
        stop=backoff._stop(started),
        wait=backoff._wait(),
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=announce,
        sleep=clock.sleep,  # the backoff is patience, not a subject: SAND_TIME_SCALE
        reraise=True,
    ):
        with attempt:
            return await again()
    raise AssertionError("unreachable: tenacity returns or raises")
