"""The leases a run holds while it changes backends (``sand.backends.lease``).

A run takes them only before its first change: a plan, a status and a no-op apply
read and never lock. They are taken in one fixed order, by backend name, so two
appliers of a project on two backends never hold one each and wait on the other.
What was observed before a lease was taken may be stale by then (another applier
came and went): a grant that is not fresh sends the run back to plan again, under
the lease, before anything changes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from types import TracebackType

from sand.apply.reconcile import Prepared
from sand.backends.lease import DEFAULT_TTL, LeaseBusy, LeaseHolder
from sand.plan import Plan
from sand.project import Session

# Plans made again, at most, when other appliers keep writing between plan and lease.
REPLANS = 3


def lease_ttl() -> float:
    """Seconds a lease lasts without renewal: ``SAND_LEASE_TTL``, else 60."""
    try:
        value = float(os.environ.get("SAND_LEASE_TTL", "") or DEFAULT_TTL)
    except ValueError:
        return DEFAULT_TTL
    return value if value >= 1 else DEFAULT_TTL


def changed_backends(plan: Plan) -> set[str]:
    """The backends a plan changes."""
    return {c.backend for c in plan.changes if c.acts} | {
        d.backend for d in plan.recovery if d.acts
    }


@dataclass
class ProjectLeases:
    """Leases of one run, released when it ends (``async with``)."""

    session: Session
    holder: LeaseHolder
    wait: float = 0.0  # seconds to wait for a busy lease before LeaseBusy
    ttl: float = field(default_factory=lease_ttl)
    on_wait: Callable[[LeaseBusy], None] | None = None
    held: set[str] = field(default_factory=set)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def take(self, backends: Collection[str]) -> bool:
        """Hold the leases of ``backends`` (those not held yet), by name. True when
        nobody else wrote to them since this run observed them."""
        fresh = True
        for name in sorted(set(backends) - self.held):
            backend = self.session.backends[name]
            grant = await self._stack.enter_async_context(
                backend.lease(self.holder, ttl=self.ttl, wait=self.wait, on_wait=self.on_wait)
            )
            self.held.add(name)
            fresh = fresh and grant.fresh
        return fresh

    async def for_replay(self) -> None:
        """A journal replay changes backends: hold theirs first."""
        pending = {e.backend for e in self.session.journal.pending()}
        await self.take(pending & set(self.session.backends))

    async def __aenter__(self) -> ProjectLeases:
        await self._stack.__aenter__()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self.held.clear()
        return await self._stack.__aexit__(t, e, tb)


async def leased(
    leases: ProjectLeases,
    prepared: Prepared,
    plan_again: Callable[[], Awaitable[Prepared]],
) -> tuple[Prepared, bool]:
    """Hold the leases ``prepared``'s changes need; plan again (under them) while
    another applier wrote since the plan was made. Returns the plan to carry out and
    whether it is a new one."""
    again = False
    for _ in range(REPLANS):
        if await leases.take(changed_backends(prepared.plan)):
            return prepared, again
        prepared, again = await plan_again(), True
    return prepared, again


def same_changes(a: Plan, b: Plan) -> bool:
    """Whether two plans would do the same (what a person approved is still the plan)."""

    def key(plan: Plan) -> list[tuple[str, str, str, tuple[str, ...]]]:
        return sorted((c.backend, c.vm, c.verb, tuple(c.reasons)) for c in plan.changes)

    return key(a) == key(b)
