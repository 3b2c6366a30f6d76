"""The project's lease on a Proxmox cluster: one small VM config, written with ``digest``.

PVE has one compare-and-set a pool-scoped token can use: a config write carrying the
``digest`` it read is refused ("file changed by other user") when anyone wrote the
config since, and the check runs under the config's own lock. A pool has no digest,
so the lease is a dedicated object in the backend's pool: a VM that is never started
and has no disk, named ``sand-lease-<project>``, tagged ``sand-lease`` and this
backend's tag. Its description holds the record (:class:`LeaseRecord`, in a fenced
``sand-lease`` block); its tags hold the record's generation, which the listing
``observe`` reads anyway shows, so a taker knows for free whether anyone wrote since
it observed.

Requests per apply: the config GET and the digest PUT that take it, and one PUT that
releases it (ttl/3 renewals add a GET and a PUT each). The release is sent without a
digest, and only while more than half the ttl is left: no other taker can hold a
lease that has not expired, so there is nothing to race.

The first take of a project makes the object. Two hosts making it at once would each
hold one, so a maker lists again and, seeing another, deletes its own and tries again.
Its name is fixed, so a cluster listing that leaves it out (stale, cut short) is never
trusted alone: before making one, and when checking for another after, sand asks the
placement nodes' own VM lists (``GET /nodes/{node}/qemu``).
"""

from __future__ import annotations

import re
import time
from typing import Any

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
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmids, vmops
from sand.backends.proxmox.context import Ctx, in_pool
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import Row, listing

LEASE_TAG = "sand-lease"
GEN_PREFIX = "sand-lease-gen-"
_GEN_TAG = re.compile(r"^sand-lease-gen-([0-9]{1,12})$")
_BLOCK = re.compile(r"```sand-lease[ \t]*\r?\n(.*?)\r?\n```", re.DOTALL)


def lease_name(project: str) -> str:
    return f"sand-lease-{project}"


def is_lease_row(ctx: Ctx, row: Row) -> bool:
    """This backend's lease object for this project, as a listing shows it."""
    return _named_lease(ctx, row) and in_pool(ctx, row)


def _named_lease(ctx: Ctx, row: Row) -> bool:
    tags = mk.split_tags(row.get("tags"))
    return (
        row.get("name") == lease_name(ctx.project)
        and LEASE_TAG in tags
        and mk.backend_tag(ctx.name) in tags
        and not row.get("template")
    )


async def _on_the_nodes(ctx: Ctx) -> list[Row]:
    """The lease object as the nodes it is made on list it (``GET /nodes/{node}/qemu``,
    each node's own VM list): a cluster listing that left it out (stale, or cut short)
    must not make a second one, or two hosts would hold two different leases."""
    found: list[Row] = []
    for node in dict.fromkeys(ctx.config.placement_nodes):
        try:
            rows = await ctx.client.get(f"nodes/{node}/qemu")
        except ProxmoxError as e:
            if e.status == 595 or e.kind is ErrorKind.NOT_FOUND:
                continue  # the node is offline or gone: nothing of ours is made there now
            raise
        found += [{**r, "node": node} for r in rows or [] if _named_lease(ctx, r)]
    return found


def generation(tags: object) -> int | None:
    for tag in mk.split_tags(tags):
        found = _GEN_TAG.match(tag)
        if found:
            return int(found[1])
    return None


def parse_record(description: object) -> LeaseRecord | None:
    found = _BLOCK.findall(str(description or ""))
    return LeaseRecord.from_json(found[-1]) if found else None


def describe(record: LeaseRecord) -> str:
    return (
        f"sand keeps the apply lease of project {record.project} here: one writer at a time. "
        "Never started, no disk. Delete it only while no sand apply runs.\n\n"
        f"```sand-lease\n{record.to_json()}\n```\n"
    )


def lease_tags(ctx: Ctx, current: object, record: LeaseRecord) -> str:
    """The object's tags for ``record``; an operator's own tags are kept."""
    keep = [t for t in mk.split_tags(current) if not t.startswith(GEN_PREFIX)]
    return mk.join_tags([*keep, LEASE_TAG, mk.backend_tag(ctx.name), f"{GEN_PREFIX}{record.gen}"])


class ProxmoxLease:
    """One holding of the lease (a :class:`sand.backends.lease.Keeper`)."""

    def __init__(self, ctx: Ctx, holder: LeaseHolder, ttl: float) -> None:
        self.ctx = ctx
        self.holder = holder
        self.ttl = ttl
        # The listing the last observe read (None: not observed): what "fresh" means.
        self.seen = ctx.last_rows
        self._hint = ctx.last_rows  # where the first attempt looks for the object
        self.path = ""  # the object's config path, once found or made
        self.record: LeaseRecord | None = None  # what this holder last wrote
        self.tags = ""

    def _busy(self, record: LeaseRecord | None) -> LeaseBusy:
        return LeaseBusy(self.ctx.project, self.ctx.name, record)

    async def _find(self) -> Row | None:
        rows, self._hint = self._hint, None
        if rows is not None:
            found = [r for r in rows if is_lease_row(self.ctx, r)]
            if found:
                return min(found, key=lambda r: int(r["vmid"]))
        # Not there when observed: perhaps made since, by another host; and before one is
        # made, asked of the nodes themselves, never the cluster listing alone.
        found = [r for r in await listing(self.ctx) if is_lease_row(self.ctx, r)]
        found = found or await _on_the_nodes(self.ctx)
        return min(found, key=lambda r: int(r["vmid"])) if found else None

    async def take(self) -> LeaseGrant:
        row = await self._find()
        if row is None:
            return await self._make()
        self.path = f"{vmops.vm_path(str(row['node']), row['vmid'])}/config"
        config = await self.ctx.client.get(self.path)
        current = parse_record(config.get("description"))
        now = time.time()
        if (
            current is not None
            and current.held(now)
            and current.holder != self.holder
            and not current.holder.gone()
        ):
            raise self._busy(current)
        record = (
            current.taken_by(self.holder, self.ttl, now)
            if current is not None
            else first_record(self.ctx.project, self.holder, self.ttl, now)
        )
        try:
            await self._write(config, record, digest=True)
        except ProxmoxError as e:
            # No answer: the write may have landed. Only a look tells.
            if not e.transient or parse_record((await self._config()).get("description")) != record:
                raise
            self.record = record
        # Taken only once expired a grace ago (``held``): what is left of it, if anything.
        wait = hold_off(current, self.holder, now - current.expires) if current else 0.0
        return LeaseGrant(fresh=self._fresh(current), hold_off=wait)

    def _fresh(self, current: LeaseRecord | None) -> bool:
        """Nobody held the lease since the observation: it was released then, and its
        generation is still the one the listing showed."""
        if self.seen is None:
            return True
        rows = [r for r in self.seen if is_lease_row(self.ctx, r)]
        if not rows or current is None or current.state == HELD:
            return False
        return generation(min(rows, key=lambda r: int(r["vmid"])).get("tags")) == current.gen

    async def _config(self) -> dict[str, Any]:
        return dict(await self.ctx.client.get(self.path) or {})

    async def _write(self, config: dict[str, Any], record: LeaseRecord, *, digest: bool) -> None:
        tags = lease_tags(self.ctx, config.get("tags"), record)
        params: dict[str, Any] = {"description": describe(record), "tags": tags}
        if digest:
            params["digest"] = config.get("digest")
        try:
            # Never retried: a retry of a write that landed would meet its own digest
            # change and read as someone else's.
            await self.ctx.client.request("PUT", self.path, params, retry=False)
        except ProxmoxError as e:
            if e.kind is ErrorKind.CONFLICT:
                raise self._busy(parse_record(config.get("description"))) from None
            raise
        self.record, self.tags = record, tags

    async def _make(self) -> LeaseGrant:
        ctx = self.ctx
        node = ctx.config.placement_nodes[0]
        # From this process's count (vmids.py): clones later in the run count past it.
        vmid = await vmids.take(ctx)
        record = first_record(ctx.project, self.holder, self.ttl, time.time())
        tags = lease_tags(ctx, "", record)
        try:
            await ctx.client.task(
                "POST",
                f"nodes/{node}/qemu",
                {
                    "vmid": vmid,
                    "name": lease_name(ctx.project),
                    "pool": ctx.config.pool,
                    "description": describe(record),
                    "tags": tags,
                },
                what=f"making the lease object of project {ctx.project} (VM {vmid})",
                timeout=ctx.timeouts.config,
            )
        except ProxmoxError as e:
            if e.kind is ErrorKind.EXISTS:  # another client took the id first
                await vmids.taken(ctx, vmid)
                raise self._busy(None) from None
            raise
        finally:
            ctx.cloning_ids.discard(vmid)
        others = [r for r in await listing(ctx) if is_lease_row(ctx, r) and int(r["vmid"]) != vmid]
        if not others:
            others = [r for r in await _on_the_nodes(ctx) if int(r["vmid"]) != vmid]
        if others:
            # Another taker made one at the same time: keep theirs, take it next time.
            await vmops.destroy(ctx, node, vmid)
            raise self._busy(None)
        self.path = f"{vmops.vm_path(node, vmid)}/config"
        self.record, self.tags = record, tags
        return LeaseGrant(fresh=True)

    async def _mine(self) -> tuple[dict[str, Any], LeaseRecord]:
        config = await self._config()
        current = parse_record(config.get("description"))
        if current is None or current.state != HELD or current.holder != self.holder:
            who = current.holder.describe() if current is not None else "nobody"
            raise LeaseLost(
                f"lost the lease of project {self.ctx.project} on backend {self.ctx.name}: "
                f"it is held by {who} now"
            )
        return config, current

    async def renew(self) -> None:
        config, current = await self._mine()
        await self._write(config, current.renewed(time.time()), digest=True)

    async def release(self, valid_for: float) -> None:
        if self.record is None:
            return
        if valid_for > self.ttl / 2:
            # Nobody can take a lease that has not expired: one PUT, no read.
            mine = {"tags": self.tags}
            await self._write(mine, self.record.released(time.time()), digest=False)
            return
        try:
            config, current = await self._mine()
        except LeaseLost:
            return  # someone else holds it now: theirs to release
        await self._write(config, current.released(time.time()), digest=True)


async def read_lease(ctx: Ctx) -> LeaseRecord | None:
    """The stored record (for ``sand status``): the listing observe read, one GET."""
    rows = ctx.last_rows if ctx.last_rows is not None else await listing(ctx)
    found = sorted((r for r in rows if is_lease_row(ctx, r)), key=lambda r: int(r["vmid"]))
    if not found:
        return None
    row = found[0]
    config = await ctx.client.get(f"{vmops.vm_path(str(row['node']), row['vmid'])}/config")
    return parse_record(config.get("description"))
