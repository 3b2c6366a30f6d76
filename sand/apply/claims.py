"""A run's claims of warm-pool spares, and the refills that wait on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sand.apply.events import Phase, Steps
from sand.backends.abilities import ClaimsSpares
from sand.backends.protocol import Backend
from sand.errors import BackendError
from sand.observed import ObservedVM
from sand.plan import Plan, VMChange
from sand.state.journal import Journal


class ClaimsInRun:
    """The spares a plan claims: the refill of a claimed spare's slot (a create under
    its name) waits until the claim renamed it, and is not made when the claim failed
    (the spare is still there).

    ``released(backend, spare)`` runs once a claim landed, before that refill may begin:
    what this host let the spare's name reach (its broker grant, its place at the egress
    proxy) goes with the name, so the claimed guest keeps none of it and the refill's
    new spare starts from nothing."""

    def __init__(self, plan: Plan, released: Callable[[str, str], None] | None = None) -> None:
        self._done = {(c.backend, c.claims): asyncio.Event() for c in plan.actionable() if c.claims}
        self._landed: set[tuple[str, str]] = set()
        self._released = released

    async def refillable(self, change: VMChange) -> bool:
        done = self._done.get((change.backend, change.vm)) if change.refill else None
        if done is None:
            return True
        await done.wait()
        return (change.backend, change.vm) in self._landed

    async def claim(
        self, change: VMChange, backend: Backend, journal: Journal, say: Steps
    ) -> ObservedVM:
        assert change.claim is not None and change.claims and change.desired is not None
        key = (change.backend, change.claims)
        try:
            if not isinstance(backend, ClaimsSpares):
                raise BackendError(f"backend {change.backend!r} cannot claim a spare")
            say(Phase.CREATING, f"claiming spare {change.claims} of pool {change.desired.pool}")
            claimed = await backend.claim(change.claim, change.desired, journal)
            self._landed.add(key)
            if self._released is not None:
                self._released(change.backend, change.claims)
            return claimed
        finally:
            if key in self._done:
                self._done[key].set()
