"""Crash recovery: decide what an unfinished journal entry leaves to do, then do it.

The decision is read-only (``sand plan`` shows it; ``apply`` acts on it, then plans,
so both agree). Before anything is decided in ``apply``, the tasks the killed run
started (their UPIDs are journalled) and any other task still active on the VM are
awaited, bounded, so nothing is settled while a start, stop or clone still runs.

Identity comes first: a step is replayed only on the VM it was journalled for, this
project's marker on the same vmid, this backend's (the one ownership rule,
``sand.observed.ownership``), in this backend's pool, with the incarnation the entry
recorded (``op`` in the description block). Anything else at that id (a successor that
got the vmid, someone else's VM) makes the entry moot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.backends.proxmox import claims, vmops
from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx, in_pool
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import is_protected, owner, read_config
from sand.observed import Ownership, RecordedVM
from sand.state.journal import PendingEntry


@dataclass(frozen=True)
class _Seen:
    """What is at the entry's vmid now, as far as ownership goes."""

    row: Mapping[str, Any]
    config: Mapping[str, Any]
    ownership: Ownership  # the one rule, on tags and description
    # The rule on the description alone: PVE copies a template's tags into its clone,
    # so until sand configures a clone (its tags then name it) they are the template's.
    by_description: Ownership
    tagged: bool  # tags: this project, this vmid (a configured VM)
    described: bool  # description block: this project, this vmid
    named: str  # the name in the block ("" without one)
    incarnation: str  # the block's ``op``
    in_pool: bool

    @property
    def ours(self) -> bool:
        return self.ownership is Ownership.MANAGED and self.in_pool

    @property
    def ours_unconfigured(self) -> bool:
        """Ours, for a clone not configured yet: its description alone speaks for it."""
        return not self.tagged and self.by_description is Ownership.MANAGED and self.in_pool

    @property
    def other_backend(self) -> bool:
        return self.ownership is Ownership.OTHER_BACKEND


def entry_decision(
    ctx: Ctx, entry: PendingEntry, action: RecoveryAction, summary: str, *, absent: bool
) -> RecoveryDecision:
    return RecoveryDecision(
        entry=entry.id,
        backend=ctx.name,
        vm=entry.vm,
        op=entry.op,
        identity=entry.identity,
        action=action,
        summary=summary,
        absent=absent,
    )


async def _seen(ctx: Ctx, row: Mapping[str, Any], vmid: str) -> _Seen:
    config = await read_config(ctx, str(row.get("node")), vmid)
    tags = mk.parse_tags(config.get("tags"))
    block = desc.parse_block(config.get("description")) or {}
    described = desc.parse_description(config.get("description"))
    return _Seen(
        row=row,
        config=config,
        ownership=owner(ctx, vmid, mk.claims(tags, described)),
        by_description=owner(ctx, vmid, mk.claims(None, described)),
        tagged=tags.complete and tags.project == ctx.project and tags.identity == vmid,
        described=described is not None
        and described.project == ctx.project
        and described.identity == vmid,
        named=described.name if described is not None else "",
        incarnation=str(block.get("op") or ""),
        in_pool=in_pool(ctx, row),
    )


async def decide(ctx: Ctx, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
    op, vmid, name = entry.op, entry.identity, entry.vm
    what = f"interrupted {op} of {name}"
    tasks = list(entry.tasks or [])
    if wait:
        # A task the killed run started goes on without it: let it end first.
        nodes = [str(entry.detail("node") or "")]
        await vmops.await_tasks(ctx, nodes, vmid, tasks, why=f"the {what} (VM {vmid})")
    # A clone in flight is not in the pool yet, so a pool token cannot see it though its
    # id is taken: only then is an invisible VM waited for (bounded). Any other VM the
    # token cannot see is not this backend's to touch.
    in_flight = op in ("create", "base") and not entry.detail("adopt") and not (wait and tasks)
    if wait and in_flight:
        row = await vmops.find_or_wait(ctx, vmid)
    else:
        row = await vmops.locate(ctx, vmid)
        if row is None and await vmops.id_taken(ctx, vmid):
            if in_flight:
                return entry_decision(
                    ctx,
                    entry,
                    RecoveryAction.WAIT,
                    f"wait for VM {vmid} (its id is taken but the listing does not show it: "
                    f"a clone still running?), then settle the {what}",
                    absent=False,
                )
            return entry_decision(
                ctx,
                entry,
                RecoveryAction.MOOT,
                f"the {what} is moot: VM {vmid} exists but this backend cannot see it (outside "
                "its pool); left alone",
                absent=False,
            )
    if row is None:
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.NOTHING,
            f"nothing to do for the {what}: VM {vmid} does not exist",
            absent=True,
        )
    node = str(row.get("node"))
    if not wait:
        busy = row.get("lock") or await _active(ctx, node, vmid)
        if busy:
            return entry_decision(
                ctx,
                entry,
                RecoveryAction.WAIT,
                f"wait for the task still running on VM {vmid} ({busy}), then settle the {what}",
                absent=False,
            )
    elif row.get("lock"):
        # Still locked (a clone or destroy whose UPID was never journalled): let it end.
        # Still locked after the wait: raise, so the entry stays open for the next run.
        await vmops.wait_unlocked(ctx, node, vmid, why=f"the {what} is settled on the next run")
        row = await vmops.locate(ctx, vmid) or row
    if op in ("base", "base-delete"):
        return await _decide_base(ctx, entry, row)
    seen = await _seen(ctx, row, vmid)
    if op == "create":
        return _decide_create(ctx, entry, seen)
    if op == "delete":
        return _decide_delete(ctx, entry, seen)
    if not _same_incarnation(entry, seen):
        return _moot(ctx, entry, seen)
    if op == claims.OP:  # one config write: the VM is the spare or the claimed VM
        said = claims.claim_outcome(name, str(entry.detail("spare") or ""), vmid, seen.named)
        return entry_decision(ctx, entry, RecoveryAction.NOTHING, said, absent=False)
    if op == "update":
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.NOTHING,
            f"the {what} (VM {vmid}) was cut short; its tasks have ended and the plan "
            "re-applies what is left",
            absent=False,
        )
    return entry_decision(
        ctx, entry, RecoveryAction.NOTHING, f"nothing to do for the {what}", absent=False
    )


async def _decide_base(ctx: Ctx, entry: PendingEntry, row: Mapping[str, Any]) -> RecoveryDecision:
    """A golden base's build or delete cut short: a base that is not ready (the build
    never froze it) is removed, so no VM is ever cloned from it; a ready one is kept."""
    vmid, name = entry.identity, entry.vm
    config = await read_config(ctx, str(row.get("node")), vmid)
    block = desc.parse_golden_block(config.get("description")) or {}
    # A build's own entry made this base (its incarnation); a delete's, any of ours.
    made_here = entry.op != "base" or str(block.get("op") or "") == entry.id
    ours = (
        block.get("project") == ctx.project
        and block.get("backend") == ctx.name
        and str(block.get("vmid")) == vmid
        and in_pool(ctx, row)
        and made_here
    )
    if not ours:
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.MOOT,
            f"the interrupted {entry.op} of golden base {name} is moot: VM {vmid} is not a "
            "base sand built for this project here; left alone",
            absent=False,
        )
    tags = mk.parse_tags(config.get("tags"))
    ready = bool(row.get("template")) and tags.golden == str(block.get("fingerprint"))
    if entry.op == "base" and ready:
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.NOTHING,
            f"golden base {name} (VM {vmid}) was built and frozen before the run stopped: kept",
            absent=False,
        )
    if is_protected(config):
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.LEAVE,
            f"leave golden base {name} (VM {vmid}) alone: it is protected",
            absent=False,
        )
    what = (
        f"delete half-built golden base {name} (VM {vmid}): its build was interrupted "
        "before it was frozen, so nothing was cloned from it"
        if entry.op == "base"
        else f"finish the interrupted delete of golden base {name} (VM {vmid})"
    )
    return entry_decision(ctx, entry, RecoveryAction.DELETE, what, absent=True)


async def _active(ctx: Ctx, node: str, vmid: str) -> str:
    try:
        tasks = await vmops.active_tasks(ctx, node, vmid)
    except ProxmoxError as e:
        if e.status in (403, 595):
            return ""
        raise
    return ", ".join(t.split(":")[5] if t.count(":") > 5 else t for t in tasks)


def _same_incarnation(entry: PendingEntry, seen: _Seen) -> bool:
    """The VM is the one the entry acted on (entries from before incarnations: unknown)."""
    if not seen.ours:
        return False
    if "incarnation" not in entry.details:
        return True
    return str(entry.detail("incarnation") or "") == seen.incarnation


def _moot(ctx: Ctx, entry: PendingEntry, seen: _Seen) -> RecoveryDecision:
    vmid, op = entry.identity, entry.op
    if not seen.in_pool and (seen.tagged or seen.described):
        why = "it carries this project's marker but is outside the pool"
    elif seen.other_backend:
        why = "it belongs to another backend entry"
    elif seen.tagged or seen.described:
        why = "it is another VM that got the same vmid (its incarnation differs)"
    else:
        why = "it is not this project's"
    return entry_decision(
        ctx,
        entry,
        RecoveryAction.MOOT,
        f"the interrupted {op} of {entry.vm} is moot: VM {vmid} is not the VM it "
        f"acted on ({why}); left alone",
        absent=False,
    )


def _decide_create(ctx: Ctx, entry: PendingEntry, seen: _Seen) -> RecoveryDecision:
    vmid, name, entry_id = entry.identity, entry.vm, entry.id
    steps = list(entry.steps or [])
    adopting = bool(entry.detail("adopt"))
    if adopting:
        made_here = False
        matches = _same_incarnation(entry, seen)
    else:
        # Made by this entry: its id is the clone's incarnation. A clone that lost its
        # block (never before incarnations were kept) is told by the entry's own steps.
        made_here = seen.incarnation == entry_id or (
            not seen.incarnation
            and "cloned" in steps
            and (seen.named == name or seen.row.get("name") == name)
        )
        matches = made_here
    # A clone this entry made carries its template's tags until it is configured.
    ours = seen.ours or (made_here and seen.ours_unconfigured)
    if not ours or not matches:
        return _moot(ctx, entry, seen)
    if seen.tagged:
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.ADOPT,
            f"adopt VM {vmid} of {name}: its interrupted create was past configuration "
            "(the plan finishes it)",
            absent=False,
        )
    if adopting:
        return _moot(ctx, entry, seen)
    if is_protected(seen.config):
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.LEAVE,
            f"leave half-made clone {vmid} of {name} alone: it is protected",
            absent=False,
        )
    return entry_decision(
        ctx,
        entry,
        RecoveryAction.DELETE,
        f"delete half-made clone {vmid} of {name} (its create was interrupted before "
        "configuration)",
        absent=True,
    )


def _decide_delete(ctx: Ctx, entry: PendingEntry, seen: _Seen) -> RecoveryDecision:
    vmid, name = entry.identity, entry.vm
    if not _same_incarnation(entry, seen):
        return _moot(ctx, entry, seen)
    if is_protected(seen.config) or seen.row.get("template"):
        return entry_decision(
            ctx,
            entry,
            RecoveryAction.LEAVE,
            f"leave VM {vmid} of {name} alone: protected or a template since its delete",
            absent=False,
        )
    return entry_decision(
        ctx,
        entry,
        RecoveryAction.DELETE,
        f"finish the interrupted delete of {name} (VM {vmid})",
        absent=True,
    )


async def act(ctx: Ctx, entry: PendingEntry, decision: RecoveryDecision) -> str:
    """Carry out a decision; a delete re-checks identity on a fresh read first."""
    if decision.action is not RecoveryAction.DELETE:
        return decision.summary
    vmid = decision.identity
    row = await vmops.locate(ctx, vmid)
    if row is None:
        return f"{decision.summary}: already gone"
    if row.get("lock"):
        raise ProxmoxError(
            ctx.name,
            f"VM {vmid} was locked ({row.get('lock')}) again before recovery",
            transient=True,
        )
    if decision.op in ("base", "base-delete"):
        again = await _decide_base(ctx, entry, row)
    elif decision.op == "create":
        again = _decide_create(ctx, entry, await _seen(ctx, row, vmid))
    else:
        again = _decide_delete(ctx, entry, await _seen(ctx, row, vmid))
    if again.action is not RecoveryAction.DELETE:
        return again.summary
    await vmops.destroy(ctx, str(row.get("node")), vmid)
    return decision.summary.replace("delete ", "deleted ", 1).replace("finish ", "finished ", 1)


async def vanished(ctx: Ctx, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
    """Recorded VMs the listing left out, checked by id: None when confirmed gone."""
    out: dict[str, str | None] = {}
    for rec in recorded:
        out[rec.identity] = await _still_there(ctx, rec)
    return out


async def _still_there(ctx: Ctx, rec: RecordedVM) -> str | None:
    what = f"VM {rec.identity} ({rec.name})"
    try:
        taken = await vmops.id_taken(ctx, rec.identity)
    except ProxmoxError as e:
        return f"{what} is missing from the listing and its id could not be checked: {e.detail}"
    if not taken:
        return None  # the id is free: it is gone
    if rec.node:
        try:
            config = await read_config(ctx, rec.node, rec.identity)
        except ProxmoxError:
            config = None  # no rights on it (or on another node): it may well be ours
        if config is not None:
            described = desc.parse_description(config.get("description"))
            said = owner(ctx, rec.identity, mk.claims(None, described))
            block = desc.parse_block(config.get("description")) or {}
            ours = said is Ownership.MANAGED and (
                not rec.incarnation or str(block.get("op") or "") == rec.incarnation
            )
            if not ours:
                return None  # another VM holds the id now: the one sand made is gone
    return (
        f"{what}, which sand made, is missing from the listing but still exists (its id is "
        "taken): a node out of quorum, or a token that lost its pool rights?"
    )
