"""One writer per project: the lease every backend keeps on itself (``Backend.lease``).

Before its first change an apply takes the lease of each backend it changes, so two
hosts (a laptop and a CI runner, two operators, two ``sand sync``) never change one
backend at once. The lease lives on the backend, where every host sees it; the host
file lock (``sand.state.lock``) only keeps two runs on one host apart.

A lease names its holder (host, pid, the revision ``sand sync`` applies) and expires
when it is not renewed, so a holder killed mid-apply blocks the next one for at most
its ttl, never until a person unlocks it by hand (Terraform's ``force-unlock``).

Each backend stores a :class:`LeaseRecord` its own way and implements a
:class:`Keeper` (take, renew, release); :func:`keep` does the rest the same way for
all of them: waiting for a busy lease, renewing every ttl/3, and stopping the holder
(cancelling it) when the lease is lost, because a writer whose lease another host
may now hold must not write again.

Learning of the loss from a renewal is not enough: a holder paused past its lease
(SIGSTOP, a laptop's lid, a VM migrated) wakes with its writes already under way and
its renewal not yet due. So every request to a backend passes one :class:`Fence` (the
Proxmox API client, the Lima host runner): past the deadline the holder's own
monotonic clock gives the lease, nothing more is sent and the run stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

from sand.audit.trail import record
from sand.backends.fence import Fence, LeaseExpired
from sand.errors import ErrorLayer, SandError
from sand.logs import get_logger

DEFAULT_TTL = 60.0
HELD, RELEASED = "held", "released"


def grace(ttl: float) -> float:
    """Seconds past its expiry a lease is still respected: the hosts' clocks may
    disagree a little (the record holds the holder's wall-clock time)."""
    return min(5.0, ttl / 4)


def timestamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def pid_scope() -> str:
    """This kernel's boot and this process's pid namespace: two processes with the same
    scope see the same pids. Hostnames do not tell (containers and CI runners share
    them); "" where the kernel does not say (macOS)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}"


@dataclass(frozen=True)
class LeaseHolder:
    """Who applies: the record a lease carries, and what the busy message names."""

    host: str
    pid: int
    revision: str = ""  # the git revision ``sand sync`` applies; "" for ``sand apply``
    command: str = ""
    # Tells this process's lease from an earlier one of the same pid (a restart).
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))
    # Where ``pid`` means something (see :func:`pid_scope`); "" where nothing tells.
    scope: str = ""

    @classmethod
    def here(cls, *, command: str, revision: str = "") -> LeaseHolder:
        return cls(socket.gethostname(), os.getpid(), revision, command, scope=pid_scope())

    def gone(self) -> bool:
        """Surely dead: it ran in this very pid namespace of this boot, and its pid is
        no longer there. A run killed with SIGKILL on this host so need not block the
        next one here until its lease expires. Anything else (another host, another
        container, a pid in use again) is alive as far as anyone can tell."""
        if not self.scope or self.scope != pid_scope():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def describe(self) -> str:
        extra = f", revision {self.revision[:12]}" if self.revision else ""
        return f"{self.host} (pid {self.pid}{extra})"


@dataclass(frozen=True)
class LeaseRecord:
    """What a backend stores for a project's lease. ``gen`` grows on every take and
    release: a taker that finds the number it saw when it observed, released, knows
    nobody wrote in between."""

    project: str
    holder: LeaseHolder
    state: str  # HELD or RELEASED (then ``holder`` is the last one)
    gen: int
    since: float  # epoch seconds: when it was taken (or released)
    expires: float  # epoch seconds; meaningful while HELD
    ttl: float = DEFAULT_TTL

    def held(self, now: float | None = None) -> bool:
        """Held by someone, and not expired."""
        now = time.time() if now is None else now
        return self.state == HELD and now <= self.expires + grace(self.ttl)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes | None) -> LeaseRecord | None:
        """The record, or None for nothing (never taken) or anything unreadable."""
        try:
            data = json.loads(text or "null")
            # Keys a later sand may add are ignored, not a reason to read it as free.
            who = {k: v for k, v in dict(data.pop("holder")).items() if k in _HOLDER_KEYS}
            record = cls(holder=LeaseHolder(**who), **{k: data[k] for k in data if k in _KEYS})
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
        return record if record.state in (HELD, RELEASED) else None

    def taken_by(self, holder: LeaseHolder, ttl: float, now: float) -> LeaseRecord:
        return replace(
            self, holder=holder, state=HELD, gen=self.gen + 1, since=now, expires=now + ttl, ttl=ttl
        )

    def renewed(self, now: float) -> LeaseRecord:
        return replace(self, expires=now + self.ttl)

    def released(self, now: float) -> LeaseRecord:
        return replace(self, state=RELEASED, gen=self.gen + 1, since=now, expires=now)

    def to_status(self, backend: str, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        held = self.held(now)
        return {
            "backend": backend,
            "held": held,
            "holder": {
                "host": self.holder.host,
                "pid": self.holder.pid,
                "revision": self.holder.revision or None,
                "command": self.holder.command or None,
            },
            "since": timestamp(self.since),
            "expires": timestamp(self.expires) if held else None,
        }


_HOLDER_KEYS = {f.name for f in fields(LeaseHolder)}
_KEYS = {f.name for f in fields(LeaseRecord)} - {"holder"}


def first_record(project: str, holder: LeaseHolder, ttl: float, now: float) -> LeaseRecord:
    """The record of a lease taken for the first time."""
    return LeaseRecord(project, holder, HELD, 1, now, now + ttl, ttl)


class LeaseBusy(SandError):
    """Another applier holds the lease (and kept it for as long as this one waited)."""

    layer = ErrorLayer.LEASE

    def __init__(self, project: str, backend: str, record: LeaseRecord | None) -> None:
        self.project = project
        self.backend = backend
        self.record = record
        if record is None:
            who = "another sand run"
            since = ""
        else:
            who = record.holder.describe()
            since = f" since {timestamp(record.since)}"
        super().__init__(
            f"project {project} is being applied by {who}{since} (its lease on backend {backend})"
        )


class LeaseLost(SandError):
    """The lease could not be renewed in time, or another applier holds it now."""

    layer = ErrorLayer.LEASE


@dataclass(frozen=True)
class LeaseGrant:
    """A lease taken. ``fresh``: nobody else held it since this backend last observed
    (a backend not observed yet is fresh: what it observes now, it observes under the
    lease). Not fresh: plan again before changing anything. ``hold_off``: seconds to
    wait before the first write (see :func:`hold_off`)."""

    fresh: bool
    hold_off: float = 0.0


def hold_off(current: LeaseRecord | None, holder: LeaseHolder, since_expiry: float) -> float:
    """Seconds a taker waits before its first write: a grace after the previous lease's
    expiry, ``since_expiry`` seconds ago, when its holder never released it. That holder
    stopped sending a margin before its expiry by its own clock; the grace covers a
    request it sent just then, still on its way, and clocks that disagree a little.
    Nothing to wait for after a release, or a holder seen dead on this very host."""
    if current is None or current.state != HELD or current.holder == holder:
        return 0.0
    if current.holder.gone():
        return 0.0
    return max(0.0, grace(current.ttl) - since_expiry)


class Keeper(Protocol):
    """What a backend does to keep one project's lease (one keeper per holding)."""

    async def take(self) -> LeaseGrant:
        """Take it, or raise :class:`LeaseBusy` (held by another, or taken meanwhile)."""
        ...

    async def renew(self) -> None:
        """Push the expiry on; :class:`LeaseLost` if it is no longer this holder's."""
        ...

    async def release(self, valid_for: float) -> None:
        """Give it back. ``valid_for``: seconds it surely stays this holder's."""
        ...


@contextlib.asynccontextmanager
async def keep(
    keeper: Keeper,
    *,
    project: str,
    backend: str,
    ttl: float,
    wait: float,
    poll: float | None = None,
    on_wait: Callable[[LeaseBusy], None] | None = None,
    fence: Fence | None = None,
) -> AsyncIterator[LeaseGrant]:
    """Hold ``keeper``'s lease for the body: wait up to ``wait`` seconds for a busy one
    (then :class:`LeaseBusy`), looking again every ``poll`` seconds (default: a quarter
    of the ttl, at most 1 s), renew it every ttl/3, release it at the end. ``fence``:
    the one every request to the backend passes, given the lease's deadline. If the
    lease is lost (renewals failing until it ran out, another holder found, or the
    fence refusing a request past the deadline), the task that took it is cancelled and
    :class:`LeaseLost` raised in it."""
    poll = min(1.0, ttl / 4) if poll is None else poll
    fence = Fence(backend) if fence is None else fence
    grant, sent = await _take(keeper, wait=wait, poll=poll, on_wait=on_wait, clock=fence.monotonic)
    fence.hold(sent, ttl)
    # hold_off > 0: the previous holder never released it; its lease was broken by expiry
    taken = "lease.broken" if grant.hold_off > 0 else "lease.taken"
    record(taken, project=project, backend=backend, ttl=ttl, fresh=grant.fresh)
    owner = asyncio.current_task()
    assert owner is not None
    loop = asyncio.get_running_loop()
    lost: list[SandError] = []
    holding = True
    cancelled = False  # the owner was cancelled here, and has not been told yet

    def stop(exc: SandError) -> None:
        nonlocal cancelled
        if holding and not lost:
            lost.append(exc)
            record("lease.lost", project=project, backend=backend, reason=str(exc))
            owner.cancel()
            cancelled = True

    def stop_from_anywhere(exc: LeaseExpired) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to stop
            loop.call_soon_threadsafe(stop, exc)

    fence.on_expiry = stop_from_anywhere

    async def renew_forever() -> None:
        log = get_logger()
        while True:
            await asyncio.sleep(ttl / 3)
            if fence.left() <= 0:  # paused past it: not even a renewal is sent
                stop(LeaseExpired(backend))
                return
            sent = fence.monotonic()
            try:
                await keeper.renew()
                fence.hold(sent, ttl)
                continue
            except (LeaseLost, LeaseExpired) as exc:
                stop(exc)
            except SandError as exc:
                log.warning(
                    "lease renewal failed", project=project, backend=backend, error=str(exc)
                )
                if fence.left() > ttl / 3:
                    continue  # time for another try before it runs out
                stop(
                    LeaseLost(
                        f"lost the lease of project {project} on backend {backend}: it could "
                        f"not be renewed before it expired ({exc})"
                    )
                )
            return

    renewer = asyncio.create_task(renew_forever())
    try:
        if grant.hold_off > 0:
            await asyncio.sleep(grant.hold_off)
        yield grant
    except asyncio.CancelledError:
        if cancelled:
            cancelled = False
            if owner.uncancel() == 0:
                raise lost[0] from None
        raise
    finally:
        holding = False
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        if cancelled:
            # The body ended another way (a refused request's own error) before the
            # cancellation asked for here reached it: take it back, it is not the caller's.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            owner.uncancel()
        left = fence.left()
        fence.end()
        if not lost and left > 0:
            try:
                await keeper.release(left)
                record("lease.released", project=project, backend=backend)
            except SandError as exc:
                # It expires by itself; the next applier waits at most its ttl.
                get_logger().warning(
                    "lease release failed", project=project, backend=backend, error=str(exc)
                )


async def _take(
    keeper: Keeper,
    *,
    wait: float,
    poll: float,
    on_wait: Callable[[LeaseBusy], None] | None,
    clock: Callable[[], float],
) -> tuple[LeaseGrant, float]:
    """The grant, and when (on ``clock``) the attempt that won it began."""
    deadline = time.monotonic() + wait
    told = False
    while True:
        sent = clock()
        try:
            return await keeper.take(), sent
        except LeaseBusy as busy:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if on_wait is not None and not told:
                on_wait(busy)
                told = True
            # Jittered, so two takers that collided do not collide again in step.
            await asyncio.sleep(min(left, poll * random.uniform(0.5, 1.5)))
