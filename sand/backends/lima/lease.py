"""The project's lease on a Lima host: an flock held by a process on that host.

The holder (``scripts.LEASE``, run through the host runner: locally, or on the remote
host over the backend's one SSH connection) takes the lock and keeps it while sand
feeds it a line every ttl/3. The kernel frees the lock when that process ends: when
sand releases it, when sand is killed (its end of the pipe, or its SSH connection,
closes), or when no line came for ttl seconds (a host cut off from sand). So local
Lima has today's file lock, and every host that drives one remote Lima host sees
the same one.

The record beside the lock names the holder for ``sand status`` and for a waiting
applier, and its generation tells a taker whether anyone held the lease since the
listing ``observe`` read (which prints the record too).
"""

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
    hold_off,
)
from sand.backends.lima import scripts
from sand.backends.lima.context import Ctx
from sand.backends.lima.runner import HeldProcess
from sand.errors import BackendError, SandError

ANSWER_TIMEOUT = 30.0  # seconds for the holder on the Lima host to answer a line


def _record_of(line: bytes, word: str) -> LeaseRecord | None:
    return LeaseRecord.from_json(line[len(word) :].strip())


class LimaLease:
    """One holding of the lease (a :class:`sand.backends.lease.Keeper`)."""

    def __init__(self, ctx: Ctx, holder: LeaseHolder, ttl: float) -> None:
        self.ctx = ctx
        self.holder = holder
        self.ttl = ttl
        self.seen = ctx.lease_seen  # the record the last listing showed (None: none read)
        self.proc: HeldProcess | None = None
        self.record: LeaseRecord | None = None

    def _error(self, what: str) -> BackendError:
        return BackendError(
            f"the lease holder on {self.ctx.runner.where} {what}", backend=self.ctx.name
        )

    async def take(self) -> LeaseGrant:
        ctx = self.ctx
        argv = scripts.lease_argv("take", ctx.project, self.ttl)
        proc = await ctx.runner.start(argv)
        try:
            line = await proc.readline(ANSWER_TIMEOUT)
            if line.startswith(b"busy"):
                raise LeaseBusy(ctx.project, ctx.name, _record_of(line, "busy"))
            if not line.startswith(b"taken"):
                raise self._error("did not start (is perl installed there?)")
            current = _record_of(line, "taken")
            now = time.time()
            record = (
                current.taken_by(self.holder, self.ttl, now)
                if current is not None
                else first_record(ctx.project, self.holder, self.ttl, now)
            )
            self.proc = proc
            await self._say(b"write " + record.to_json().encode())
        except BaseException:
            self.proc = None
            await proc.close()
            raise
        self.record = record
        # A lock its holder never released was freed when its holder's process on the
        # Lima host heard nothing for a ttl: just now, as far as this taker can tell.
        return LeaseGrant(fresh=self._fresh(current), hold_off=hold_off(current, self.holder, 0.0))

    def _fresh(self, current: LeaseRecord | None) -> bool:
        """Nobody held it since the listing: the record reads as it did then, released
        (or there was none then and none now)."""
        if self.seen is None:
            return True
        seen = LeaseRecord.from_json(self.seen) if self.seen else None
        if current is None or seen is None:
            return current is None and seen is None
        return current.state != HELD and current == seen

    async def _say(self, line: bytes) -> None:
        if self.proc is None:
            raise LeaseLost(f"the lease of project {self.ctx.project} is not held")
        try:
            await self.proc.write(line + b"\n")
            answer = await self.proc.readline(ANSWER_TIMEOUT)
        except SandError as exc:
            raise self._error(f"is unreachable: {exc}") from None
        if answer.strip() != b"ok":
            # It ended (expired, or its host dropped it): the lock is no longer ours.
            raise LeaseLost(
                f"lost the lease of project {self.ctx.project} on backend {self.ctx.name}: "
                f"its holder on {self.ctx.runner.where} ended"
            )

    async def renew(self) -> None:
        await self._say(b"renew")

    async def release(self, valid_for: float) -> None:
        proc, self.proc = self.proc, None
        if proc is None or self.record is None:
            return
        try:
            self.proc = proc
            await self._say(b"write " + self.record.released(time.time()).to_json().encode())
        finally:
            self.proc = None
            await proc.close()


async def read_lease(ctx: Ctx) -> LeaseRecord | None:
    """The stored record (for ``sand status``), its expiry set from the lock itself: the
    record's is not rewritten on renewals, and a killed holder never released it."""
    res = await ctx.runner.run(scripts.lease_argv("peek", ctx.project, 1), timeout=ANSWER_TIMEOUT)
    out = res.stdout.strip()
    held = out.startswith(b"busy")
    if not held and not out.startswith(b"free"):
        raise BackendError(
            f"cannot read the lease on {ctx.runner.where}: {res.err_tail() or 'no answer'}",
            backend=ctx.name,
        )
    record = _record_of(out, "busy" if held else "free")
    if record is None:
        return None
    now = time.time()
    if held:
        return dataclasses.replace(record, state=HELD, expires=now + record.ttl)
    return dataclasses.replace(record, expires=min(record.expires, now - record.ttl))
