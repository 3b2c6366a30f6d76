"""A fork: a full clone of another VM of this project, from a snapshot taken for it.

qemu-server clones a running VM's disks only through a snapshot for a consistent
copy (``PVE::API2::Qemu::clone_vm`` with ``snapname``: the volumes are copied from
the snapshot, not from the live disks), so the order is:

1. journal the intent (the source, its node, the snapshot's name) before any request;
2. ``POST …/snapshot`` (``vmstate=1`` with ``snapshot: memory``: its RAM too; qemu-server
   saves it only for a running VM);
3. the full clone with ``snapname`` into a fresh vmid (``clone.py``: its own journal
   entry, recovered as any create); PVE gives every NIC of a clone a new MAC and the
   clone a new SMBIOS UUID, so cloud-init sees a new instance (new instance-id);
4. ``DELETE …/snapshot/<name>``, whatever step 3 did: the source is never left with a
   snapshot of sand's. A run killed before it leaves the entry open: the journal replay
   removes the snapshot (``decide_fork``/``act_fork``).

The source is only read and snapshotted: no config write, no stop, no restart.
Requests per fork (measured on fakepve): eleven: the snapshot and its task, nextid,
the clone and its task, the removal and its task, a read of the clone's config (its
source's, which this run has not read), the config write, the start and its task.
"""

from __future__ import annotations

import uuid
from typing import Any

from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import Row
from sand.backends.proxmox.recover import entry_decision
from sand.desired import DesiredVM
from sand.state.journal import Journal, JournalEntry, PendingEntry

OP = "fork-snapshot"
SNAPSHOT_PREFIX = "sand-fork-"  # PVE: a letter first, then [A-Za-z0-9_-], 40 at most


def source_row(ctx: Ctx, rows: list[Row], vm: DesiredVM) -> Row:
    """The listing row of the VM ``vm`` forks: this project's, this backend's, by name."""
    assert vm.fork is not None
    for row in rows:
        tags = mk.parse_tags(row.get("tags"))
        if (
            row.get("name") == vm.fork.source
            and tags.project == ctx.project
            and tags.identity == str(row.get("vmid"))
            and not row.get("template")
        ):
            return row
    raise ProxmoxError(
        ctx.name,
        f"VM {vm.name!r} forks {vm.fork.source!r}, which this backend does not show as a "
        "VM of this project: create it first",
    )


def begin(ctx: Ctx, vm: DesiredVM, source: Row, journal: Journal) -> tuple[JournalEntry, str]:
    """Journal the fork's snapshot before it is asked for (its name is in the entry)."""
    snapname = f"{SNAPSHOT_PREFIX}{uuid.uuid4().hex[:16]}"
    entry = journal.begin(
        OP,
        backend=ctx.name,
        vm=vm.name,
        identity=str(source["vmid"]),
        node=str(source.get("node")),
        project=ctx.project,
        snapname=snapname,
    )
    return entry, snapname


async def take_snapshot(
    ctx: Ctx, vm: DesiredVM, source: Row, snapname: str, entry: JournalEntry, journal: Journal
) -> None:
    assert vm.fork is not None
    params: dict[str, Any] = {
        "snapname": snapname,
        "description": f"sand: for the fork {vm.name} (removed after its clone)",
    }
    if vm.fork.memory:
        params["vmstate"] = 1
    path = vmops.vm_path(str(source.get("node")), source["vmid"])
    try:
        await ctx.client.task(
            "POST",
            f"{path}/snapshot",
            params,
            what=f"snapshot {snapname} of VM {source['vmid']} for the fork {vm.name}",
            timeout=ctx.timeouts.clone,
            on_upid=lambda upid: journal.task(entry, upid),
        )
    except ProxmoxError as e:
        if not e.transient:  # PVE refused, or the task failed: no snapshot was made
            journal.finish(entry, "failed")
        raise  # else it may still be taken: the journal replay settles it
    journal.step(entry, "snapshot-taken")


async def remove_snapshot(ctx: Ctx, node: str, vmid: str | int, snapname: str) -> bool:
    """Delete the fork's snapshot; False when it is not there (never made, or gone)."""
    try:
        await ctx.client.task(
            "DELETE",
            f"{vmops.vm_path(node, vmid)}/snapshot/{snapname}",
            None,
            what=f"removal of snapshot {snapname} of VM {vmid}",
            timeout=ctx.timeouts.clone,
        )
    except ProxmoxError as e:
        if e.kind is ErrorKind.NOT_FOUND or "does not exist" in str(e):
            return False
        raise
    return True


async def end(ctx: Ctx, source: Row, snapname: str, entry: JournalEntry, journal: Journal) -> None:
    """Remove the snapshot and close the entry (after the clone, however it went)."""
    await remove_snapshot(ctx, str(source.get("node")), source["vmid"], snapname)
    journal.step(entry, "snapshot-removed")
    journal.finish(entry)


# --- recovery of a run killed mid-fork ------------------------------------------------------


async def _snapshots(ctx: Ctx, node: str, vmid: str) -> set[str] | None:
    try:
        answer = await ctx.client.get(f"{vmops.vm_path(node, vmid)}/snapshot")
    except ProxmoxError as e:
        if e.kind is ErrorKind.NOT_FOUND:
            return None  # the source is gone, and its snapshots with it
        raise
    return {str(s.get("name")) for s in answer or [] if isinstance(s, dict)}


async def decide_fork(ctx: Ctx, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
    vmid, snapname = entry.identity, str(entry.detail("snapname") or "")
    node = str(entry.detail("node") or "")
    if wait:
        # A snapshot (or its removal) the killed run started goes on: let it end first.
        await vmops.await_tasks(ctx, [node], vmid, list(entry.tasks), why=f"the fork {entry.vm}")
    row = await vmops.locate(ctx, vmid)
    node = str(row.get("node")) if row else node
    names = await _snapshots(ctx, node, vmid) if row else None
    if names and snapname in names:
        action, summary = (
            RecoveryAction.FINISH,
            f"remove snapshot {snapname} of VM {vmid}, left by the interrupted fork {entry.vm}",
        )
    else:
        action = RecoveryAction.NOTHING
        summary = f"the interrupted fork {entry.vm} left no snapshot on VM {vmid}"
    # absent=False: the decision is about the source's snapshot, it says nothing of the fork.
    return entry_decision(ctx, entry, action, summary, absent=False)


async def act_fork(ctx: Ctx, entry: PendingEntry, decision: RecoveryDecision) -> str:
    if decision.action is not RecoveryAction.FINISH:
        return decision.summary
    row = await vmops.locate(ctx, entry.identity)
    node = str(row.get("node")) if row else str(entry.detail("node") or "")
    snapname = str(entry.detail("snapname") or "")
    removed = await remove_snapshot(ctx, node, entry.identity, snapname)
    return f"snapshot {snapname} of VM {entry.identity} " + ("removed" if removed else "was gone")
