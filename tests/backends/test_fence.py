"""The lease's deadline as its holder counts it (``sand.backends.fence``), and the grace
a taker waits (``sand.backends.lease.hold_off``): counted from before the request that
took or renewed the lease, less a margin; past it nothing is sent and the run stops."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sand.backends.fence import Fence, LeaseExpired, margin
from sand.backends.lease import (
    DEFAULT_TTL,
    LeaseGrant,
    LeaseHolder,
    first_record,
    grace,
    hold_off,
    keep,
)
from tests.audit.helpers import audit_records

MESSAGE = (
    "lease on pve expired while this run was paused; nothing more was written; "
    "the next apply settles it"
)


@dataclasses.dataclass
class Clock:
    """The holder's monotonic clock, moved by hand (a pause is a jump)."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class SlowKeeper:
    """A keeper whose every request takes ``took`` seconds of the holder's clock."""

    clock: Clock
    took: float
    renewed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    renewals: list[float] = dataclasses.field(default_factory=list)  # clock before each
    released: list[float] = dataclasses.field(default_factory=list)

    async def take(self) -> LeaseGrant:
        self.clock.now += self.took
        return LeaseGrant(fresh=True)

    async def renew(self) -> None:
        self.renewals.append(self.clock.now)
        self.clock.now += self.took
        self.renewed.set()

    async def release(self, valid_for: float) -> None:
        self.released.append(valid_for)


def test_the_margin_is_a_sixth_of_the_ttl_and_at_most_five_seconds() -> None:
    assert margin(DEFAULT_TTL) == 5.0
    assert margin(3.0) == 0.5
    assert margin(600.0) == 5.0


def test_without_a_lease_held_nothing_is_fenced() -> None:
    clock = Clock()
    fence = Fence("pve", clock)
    clock.now += 10**9
    fence.check()
    assert fence.left() == float("inf")


def test_the_deadline_counts_from_before_the_request_less_the_margin() -> None:
    clock = Clock()
    fence = Fence("pve", clock)
    fence.hold(sent=1000.0, ttl=60.0)  # the request went out at 1000, whenever it answered
    clock.now = 1054.9
    fence.check()
    assert fence.left() == pytest.approx(0.1)
    clock.now = 1055.0
    with pytest.raises(LeaseExpired, match=MESSAGE):
        fence.check()


def test_a_later_renewal_moves_the_deadline_an_earlier_one_never_back() -> None:
    fence = Fence("pve", Clock())
    fence.hold(sent=1000.0, ttl=60.0)
    fence.hold(sent=1020.0, ttl=60.0)
    assert fence.deadline == 1075.0
    fence.hold(sent=1010.0, ttl=60.0)  # an answer that came late
    assert fence.deadline == 1075.0


def test_the_first_refusal_is_told_once_and_every_later_request_refused() -> None:
    clock = Clock()
    fence = Fence("pve", clock)
    told: list[str] = []
    fence.on_expiry = lambda exc: told.append(str(exc))
    fence.hold(sent=1000.0, ttl=60.0)
    clock.now = 2000.0
    for _ in range(3):
        with pytest.raises(LeaseExpired):
            fence.check()
    assert told == [MESSAGE]
    fence.end()  # the holding is over: nothing to fence any more
    fence.check()


async def test_keep_counts_the_deadline_from_before_a_slow_take() -> None:
    clock = Clock()
    fence = Fence("pve", clock)
    keeper = SlowKeeper(clock, took=7.0)
    async with keep(keeper, project="p", backend="pve", ttl=60.0, wait=0, fence=fence):
        assert clock.now == 1007.0
        assert fence.deadline == 1000.0 + 60.0 - 5.0  # not from when the answer came
    assert fence.deadline is None and keeper.released == [pytest.approx(48.0)]


async def test_keep_counts_a_renewal_from_before_it_was_sent() -> None:
    clock = Clock()
    fence = Fence("pve", clock)
    keeper = SlowKeeper(clock, took=0.1)
    ttl = 0.6  # renewed every 0.2 s of the real clock
    async with keep(keeper, project="p", backend="pve", ttl=ttl, wait=0, fence=fence):
        clock.now += 0.2
        await keeper.renewed.wait()
        assert fence.deadline == pytest.approx(keeper.renewals[0] + ttl - margin(ttl))


@pytest.mark.parametrize("noticed_by", ["a request", "the renewal"])
async def test_past_the_deadline_the_run_stops_and_nothing_is_renewed_or_released(
    noticed_by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    clock = Clock()
    fence = Fence("pve", clock)
    keeper = SlowKeeper(clock, took=0.0)
    with pytest.raises(LeaseExpired, match=MESSAGE):
        # Renewed every 0.2 s of the real clock; the holder's own clock jumps past the
        # lease, as after a pause, before the renewal comes due.
        async with keep(keeper, project="p", backend="pve", ttl=0.6, wait=0, fence=fence):
            clock.now += 1.0
            if noticed_by == "a request":
                with pytest.raises(LeaseExpired):
                    fence.check()  # what a worker was about to send
            await asyncio.Event().wait()  # the run's next step: it stops there
    assert keeper.renewals == [] and keeper.released == []
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    # the host's audit trail: taken, then lost (with why), never released
    trail = [(r["kind"], r.get("reason")) for r in audit_records(tmp_path / "state")]
    assert trail == [("lease.taken", None), ("lease.lost", MESSAGE)]


@dataclasses.dataclass
class TakesOver(SlowKeeper):
    """Takes a lease whose holder never released it: the grace to wait before writing."""

    async def take(self) -> LeaseGrant:
        return LeaseGrant(fresh=False, hold_off=0.01)


async def test_a_lease_taken_over_from_a_holder_that_never_released_it_is_told_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    async with keep(TakesOver(Clock(), took=0.0), project="p", backend="pve", ttl=60.0, wait=0):
        pass
    trail = [(r["kind"], r["project"], r["backend"]) for r in audit_records(tmp_path / "state")]
    assert trail == [("lease.broken", "p", "pve"), ("lease.released", "p", "pve")]
    assert audit_records(tmp_path / "state")[0]["fresh"] is False


def alive_holder() -> LeaseHolder:
    """Another holder whose process runs (this one's pid, another holding's nonce)."""
    return LeaseHolder.here(command="other")


def dead_holder() -> LeaseHolder:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return dataclasses.replace(LeaseHolder.here(command="gone"), pid=int(done.stdout))


def test_a_taker_waits_a_grace_after_an_unreleased_lease_expired() -> None:
    me = LeaseHolder.here(command="me")
    held = first_record("p", alive_holder(), 60.0, 0.0)
    assert hold_off(held, me, since_expiry=0.0) == grace(60.0) == 5.0
    assert hold_off(held, me, since_expiry=2.0) == 3.0
    assert hold_off(held, me, since_expiry=9.0) == 0.0
    short = first_record("p", alive_holder(), 3.0, 0.0)
    assert hold_off(short, me, since_expiry=0.0) == grace(3.0) == 0.75


def test_nothing_to_wait_for_after_a_release_a_first_take_or_a_dead_holder() -> None:
    me = LeaseHolder.here(command="me")
    held = first_record("p", alive_holder(), 60.0, 0.0)
    assert hold_off(held.released(1.0), me, since_expiry=0.0) == 0.0
    assert hold_off(None, me, since_expiry=0.0) == 0.0
    assert hold_off(first_record("p", me, 60.0, 0.0), me, since_expiry=0.0) == 0.0
    dead = first_record("p", dead_holder(), 60.0, 0.0)
    assert os.getpid() != dead.holder.pid and hold_off(dead, me, since_expiry=0.0) == 0.0
