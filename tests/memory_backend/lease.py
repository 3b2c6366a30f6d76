"""The project's lease as the world keeps it: one record per project, taken, renewed
and released through ``sand.backends.lease.keep`` as every backend's is."""

from __future__ import annotations

import dataclasses
import time

from sand.backends.lease import (
    HELD,
    LeaseBusy,
    LeaseGrant,
    LeaseHolder,
    LeaseLost,
    LeaseRecord,
    first_record,
)
from tests.memory_backend.world import World


@dataclasses.dataclass
class WorldLease:
    """One holding of the project's lease in the world (a ``sand.backends.lease.Keeper``)."""

    world: World
    project: str
    name: str
    holder: LeaseHolder
    ttl: float
    seen: int | None  # the lease's gen at the backend's last observe (None: none)

    @property
    def _record(self) -> LeaseRecord | None:
        return self.world.leases.get(self.project)

    def _store(self, record: LeaseRecord) -> None:
        self.world.leases[self.project] = record

    async def take(self) -> LeaseGrant:
        await self.world.step("lease", self.name, self.name)  # named by the backend entry
        now, current = time.time(), self._record
        if current is not None and current.held(now) and not current.holder.gone():
            raise LeaseBusy(self.project, self.name, current)
        if current is None:
            self._store(first_record(self.project, self.holder, self.ttl, now))
        else:
            self._store(current.taken_by(self.holder, self.ttl, now))
        seen = self.seen
        gen = current.gen if current is not None else 0
        held = current is not None and current.state == HELD
        return LeaseGrant(fresh=seen is None or (gen == seen and not held))

    async def renew(self) -> None:
        record = self._record
        if record is None or record.state != HELD or record.holder != self.holder:
            raise LeaseLost(f"lost the lease of project {self.project}")
        self._store(record.renewed(time.time()))

    async def release(self, valid_for: float) -> None:
        record = self._record
        if record is not None and record.state == HELD and record.holder == self.holder:
            self._store(record.released(time.time()))
