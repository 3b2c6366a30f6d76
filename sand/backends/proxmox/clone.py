"""The clone of a template into a fresh vmid, told apart from another client's VM.

A vmid (``vmids.py``: one ``/cluster/nextid`` per batch, then counted), journal
intent, then one full clone into pool and storage with the marker in the description.
The intent's id is in it (the VM's incarnation), so an "already exists" after a lost
answer is told apart from someone else's VM that took the id first; then another id
is tried.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, NamedTuple

from sand import activity
from sand.backends.proxmox import description as desc
from sand.backends.proxmox import vmids, vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import Row, read_config
from sand.desired import DesiredVM
from sand.errors import ErrorLayer
from sand.observed import Marker
from sand.retrying import retry_async
from sand.state.journal import Journal, JournalEntry

ID_ATTEMPTS = 5  # vmids tried when another client takes the one counted on
CLONE_ATTEMPTS = 4  # clones retried after a transient task failure (storage lock timeout)


class Cloned(NamedTuple):
    """A clone made: its vmid, its journal entry and the description it was given."""

    vmid: int
    entry: JournalEntry
    description: str


class _Taken(Exception):
    """The vmid went to another client before the clone."""


async def clone(
    ctx: Ctx,
    vm: DesiredVM,
    template: Row,
    node: str,
    storage: str,
    journal: Journal,
    *,
    base: str = "",
    snapname: str = "",
) -> Cloned:
    """Clone ``template`` into a fresh vmid on ``node`` (its journal entry at step
    ``cloned``). ``base``: the template is that golden base (its fingerprint goes
    into the marker). ``snapname``: clone that snapshot of it (a fork: ``fork.py``)."""
    # The id is asked for only once a clone slot is ours: PVE reserves nothing,
    # so creates queued behind the slot limit would all be handed the same id.
    slots = await ctx.clone_slots()
    if slots.locked():
        activity.step(f"waiting for a clone slot ({ctx.clones_chosen} at a time)")
    async with slots:
        return await _allocate_and_clone(ctx, vm, template, node, storage, journal, base, snapname)


async def _allocate_and_clone(
    ctx: Ctx,
    vm: DesiredVM,
    template: Row,
    node: str,
    storage: str,
    journal: Journal,
    base: str = "",
    snapname: str = "",
) -> Cloned:
    for _ in range(ID_ATTEMPTS):
        vmid = await vmids.take(ctx)
        try:
            result = await _try_clone(
                ctx, vm, template, node, storage, journal, vmid, base, snapname
            )
        finally:
            ctx.cloning_ids.discard(vmid)
        if result is not None:
            return Cloned(vmid, *result)
        await vmids.taken(ctx, vmid)
    raise ProxmoxError(
        ctx.name,
        f"could not allocate a vmid for {vm.name!r}: {ID_ATTEMPTS} ids were taken by other "
        "clients first",
        transient=True,
    )


async def _try_clone(
    ctx: Ctx,
    vm: DesiredVM,
    template: Row,
    node: str,
    storage: str,
    journal: Journal,
    vmid: int,
    base: str = "",
    snapname: str = "",
) -> tuple[JournalEntry, str] | None:
    """Clone into ``vmid`` (its entry and description); None when another client took
    that id first."""
    entry = await journal.begin_async(
        "create",
        backend=ctx.name,
        vm=vm.name,
        identity=str(vmid),
        node=node,
        project=ctx.project,
        template=str(template["vmid"]),
    )
    # The entry's id is the VM's incarnation, and now its creation time: both kept on
    # every later write.
    marker = Marker(
        ctx.project,
        vm.name,
        str(vmid),
        "",
        "",
        vm.image,
        backend=ctx.name,
        incarnation=entry.id,
        created_at=int(time.time()),
        base=base,
        pool=vm.spare_of,
    )
    params: dict[str, Any] = {
        "newid": vmid,
        "name": vm.name,
        "description": desc.render_block(marker),
        "pool": ctx.config.pool,
        "storage": storage,
        "full": 1,
    }
    if snapname:
        params["snapname"] = snapname
    if template.get("node") != node:
        params["target"] = node
    try:
        await _clone_task(ctx, template, vmid, params, entry.id, lambda u: journal.task(entry, u))
    except _Taken:
        journal.finish(entry, "failed")
        return None
    except ProxmoxError as e:
        if not e.transient:  # PVE refused or the task failed: nothing was made
            journal.finish(entry, "failed")
        raise  # otherwise the clone may still be running: recover() settles it
    journal.step(entry, "cloned")
    return entry, params["description"]


async def _clone_task(
    ctx: Ctx,
    template: Row,
    vmid: int,
    params: dict[str, Any],
    op: str,
    track: vmops.Track,
) -> None:
    tnode, tvmid = str(template.get("node")), template["vmid"]
    path = f"{vmops.vm_path(tnode, tvmid)}/clone"
    what = f"clone of template {tvmid} to VM {vmid}"

    async def clone() -> None:
        try:
            await ctx.client.task(
                "POST", path, params, what=what, timeout=ctx.timeouts.clone, on_upid=track
            )
        except ProxmoxError as e:
            if e.kind is not ErrorKind.EXISTS:
                raise
            # Only a request sent again after a lost answer can meet our own clone.
            if e.attempts > 1 and await _made_by(ctx, vmid, op):
                return  # our earlier attempt landed: its clone is done
            raise _Taken() from None

    def lock_contention(e: BaseException) -> bool:
        # A task that ended on lock contention is tried again here (the client has
        # already retried failed requests; a task still running at the deadline is not
        # started again: it has a UPID but is no TRANSIENT failure).
        return isinstance(e, ProxmoxError) and e.upid is not None and e.kind is ErrorKind.TRANSIENT

    await retry_async(
        clone,
        backoff=replace(ctx.client.retry, attempts=CLONE_ATTEMPTS),
        retryable=lock_contention,
        layer=ErrorLayer.PROXMOX,
        reason=lambda e: "clone task failed (storage lock)",
    )


async def _made_by(ctx: Ctx, vmid: int, op: str) -> bool:
    """Whether VM vmid was cloned by journal entry ``op`` (waits for its clone to end)."""
    row = await vmops.find_or_wait(ctx, vmid)
    if row is None:
        return False
    node = str(row.get("node"))
    if row.get("lock"):
        await vmops.wait_unlocked(ctx, node, vmid, why="its clone is still running")
    block = desc.parse_block((await read_config(ctx, node, vmid)).get("description"))
    return block is not None and block.get("op") == op
