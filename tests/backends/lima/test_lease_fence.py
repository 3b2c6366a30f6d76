"""Past its lease's deadline (by its own monotonic clock) a Lima holder sends nothing to
the Lima host, local or over SSH: every command passes the backend's fence, and the
stand-in's log shows none arrived. A taker of a lease never released waits a grace."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sand.backends.fence import LeaseExpired
from sand.backends.lease import LeaseHolder, grace
from sand.backends.lima import LimaBackend
from sand.backends.lima.lease import LimaLease
from sand.state.journal import Journal
from tests.backends.lima.conftest import MakeBackend, one
from tests.backends.lima.sshd_rig import Sshd
from tests.limactl_standin import StandIn


def paused(backend: LimaBackend, seconds: float) -> None:
    """The holder's clock as it reads after a pause of ``seconds`` (SIGSTOP, a lid)."""
    clock = backend.fence.monotonic
    backend.fence.monotonic = lambda: clock() + seconds


async def nothing_sent_once_paused(
    backend: LimaBackend, standin: StandIn, journal: Journal, mark: Callable[[], None]
) -> None:
    vm = one()
    await backend.observe([vm])
    with pytest.raises(LeaseExpired, match=r"lease on \w+ expired while this run was paused"):
        async with backend.lease(LeaseHolder.here(command="paused"), ttl=30):
            paused(backend, 30)
            mark()
            await backend.create(vm, journal)
    assert standin.invocations() == []  # not a create, nor anything else
    assert standin.instances() == []


async def test_a_local_holder_past_its_deadline_runs_nothing_on_the_host(
    backend: LimaBackend, standin: StandIn, journal: Journal
) -> None:
    await nothing_sent_once_paused(backend, standin, journal, standin.clear_log)


async def test_a_remote_holder_past_its_deadline_runs_nothing_on_the_host(
    sshd: Sshd, journal: Journal
) -> None:
    backend = sshd.backend()
    try:
        await nothing_sent_once_paused(backend, sshd.standin, journal, sshd.standin.clear_log)
    finally:
        await backend.close()


async def test_a_taker_of_a_lease_never_released_waits_a_grace(
    make_backend: MakeBackend,
) -> None:
    first, second = make_backend(), make_backend()
    before = LimaLease(first.ctx, LeaseHolder.here(command="before"), 3.0)
    await before.take()
    assert before.proc is not None
    await before.proc.close()  # its holder on the host ends, the record still says held
    after = LimaLease(second.ctx, LeaseHolder.here(command="after"), 3.0)
    grant = await after.take()
    assert grant.hold_off == grace(3.0)
    await after.release(3.0)
    again = LimaLease(second.ctx, LeaseHolder.here(command="again"), 3.0)
    try:
        # Released: nothing of the last holder's can still be on its way.
        assert (await again.take()).hold_off == 0.0
    finally:
        await again.release(3.0)
