"""Forks on Lima: ``limactl clone`` of another instance of this project.

``limactl clone`` copies a *stopped* instance (Lima's ``pkg/instance/clone.go`` refuses
a running one), so a running source is stopped for the copies and started again after
them, whatever the copies did. The forks of one source that one apply makes are copied
together (a batch: the apply says which, :func:`expect`), so the source is stopped
once and started once however many forks it gets. The order:

1. each fork's ``create`` entry (``via: fork:<source>``, the fork's incarnation and the
   source's), then one ``fork-stop`` entry on the source (its incarnation, whether it
   was running, the batch's forks) are journalled before any call;
2. ``limactl stop <source>`` (only when it runs);
3. ``limactl clone <source> <fork>`` with each fork's settings, one after another (each
   ``create`` entry's step ``created``); each fork goes on (its marker, its start) as
   soon as its copy is made;
4. ``limactl start <source>`` when it was running; then the ``fork-stop`` entry ends.
   A fork's create ends only once its source is back: the source's failed start fails it.

A run killed anywhere leaves the ``fork-stop`` entry open: the next run (and ``plan``,
which shows it) waits for the limactl children the killed run left, then starts the
source again if it is still stopped (:func:`decide_fork_stop`). A copy carries the
source's marker file (clone copies every file) until the fork's own is written; the
``create`` entry's recovery removes such a copy (``recover._decide_create``).

Batches of one source take turns (a lock per source): forks the apply did not announce
(and forced and unforced forks, whose looks at the source's agent differ) are batches of
their own. The source is otherwise untouched: no edit, no marker write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sand.backends.lima import limayaml, vmops
from sand.backends.lima.context import Ctx, ForkBatch
from sand.backends.lima.marker import classify, new_uid
from sand.backends.lima.observe import Inspected, cleanup_half_made, inspect, refuse_taken
from sand.backends.protocol import RecoveryAction
from sand.desired import DesiredVM
from sand.errors import BackendError, SandError
from sand.manifest.backends.lima import RESERVED_PREFIX
from sand.observed import Ownership
from sand.state.journal import Journal, JournalEntry, PendingEntry

OP = "fork-stop"
VIA = "fork:"  # the create entry's ``via`` for a fork: fork:<source>


@dataclass(frozen=True)
class Source:
    """The instance a fork is copied from, as read just before the copy."""

    name: str
    uid: str  # its incarnation (its marker's)
    running: bool


@dataclass(frozen=True)
class Made:
    """One fork's copy, made: its create entry (step ``created``) and incarnation."""

    entry: JournalEntry
    uid: str
    source: Source
    restarted: asyncio.Future[None]  # the source, started again (when it ran)


def expect(ctx: Ctx, forks: Sequence[DesiredVM]) -> None:
    """The forks this run's plan creates: those of one source (and one ``force``) are
    copied with one stop of it."""
    ctx.fork_batches = {}
    groups: dict[tuple[str, bool], ForkBatch] = {}
    for vm in forks:
        assert vm.fork is not None
        batch = groups.setdefault((vm.fork.source, vm.fork.force), ForkBatch([]))
        batch.forks.append(vm)
        ctx.fork_batches[vm.name] = batch


def source_lock(ctx: Ctx, source: str) -> asyncio.Lock:
    """One batch at a time per source: each stops it, copies it and starts it again."""
    return ctx.fork_locks.setdefault(source, asyncio.Lock())


async def copied(ctx: Ctx, vm: DesiredVM, journal: Journal) -> Made:
    """``vm``'s copy of its source, made by its batch (started by the first of its forks
    to get here); raises what failed this fork."""
    batch = ctx.fork_batches.pop(vm.name, None) or ForkBatch([vm])
    if batch.task is None:
        loop = asyncio.get_running_loop()
        batch.made = {v.name: loop.create_future() for v in batch.forks}
        batch.restarted = loop.create_future()
        batch.task = asyncio.ensure_future(_copy_batch(ctx, batch, journal))
    made: Made = await asyncio.shield(batch.made[vm.name])
    return made


async def read_source(ctx: Ctx, vm: DesiredVM) -> Source:
    """The source of ``vm``, refused unless it is a settled instance of this project's
    backend entry (the plan saw it; it is read again now, just before the copy)."""
    assert vm.fork is not None
    name = vm.fork.source
    found = (await inspect(ctx, name))[name]
    inst = found.instance
    if inst is None or name.startswith(RESERVED_PREFIX):
        raise BackendError(
            f"VM {vm.name!r} forks {name!r}, which is not an instance on "
            f"{ctx.runner.where}: create it first",
            backend=ctx.name,
        )
    c = classify(name, found.sidecar, inst.param, ctx.project, ctx.name)
    if c.ownership is not Ownership.MANAGED or c.incomplete or found.sidecar is None:
        raise BackendError(
            f"VM {vm.name!r} forks {name!r}, which is {c.ownership.value}, not a settled VM "
            "of this backend: sand copies only its own VMs",
            backend=ctx.name,
        )
    if inst.status not in ("Running", "Stopped"):
        raise BackendError(
            f"VM {vm.name!r} forks {name!r}, whose Lima status is {inst.status or 'unknown'}: "
            "fork it once it is running or stopped",
            backend=ctx.name,
            transient=True,
        )
    return Source(name, found.sidecar.uid, inst.status == "Running")


def _settle(future: asyncio.Future[Any] | None, exc: BaseException | None) -> None:
    """Resolve ``future`` (once); an error is raised to whoever awaits it, and is not
    reported as never retrieved when no fork waits for it any more."""
    if future is None or future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
        future.exception()  # marks it retrieved: the forks that await it still raise


async def _copy_batch(ctx: Ctx, batch: ForkBatch, journal: Journal) -> None:
    """Stop the source (when it runs), clone it once per fork, start it again. What
    fails reaches the forks through their futures (this task's own result is unread)."""
    failed: Exception | None = None
    try:
        await _copy_all(ctx, batch, journal)
    except asyncio.CancelledError:
        for future in [*batch.made.values(), batch.restarted]:
            if future is not None and not future.done():
                future.cancel()
        raise
    except Exception as exc:  # each waiting fork raises it as its own
        failed = exc
    for future in batch.made.values():
        _settle(future, failed or BackendError("the fork's copy was never made"))
    _settle(batch.restarted, failed)


async def _copy_all(ctx: Ctx, batch: ForkBatch, journal: Journal) -> None:
    first = batch.forks[0]
    source = await read_source(ctx, first)
    async with source_lock(ctx, source.name):
        # Read again once it is this batch's turn: its power, and that it is the same.
        now = (await inspect(ctx, source.name))[source.name]
        if now.instance is None or now.sidecar is None or now.sidecar.uid != source.uid:
            raise BackendError(
                f"{source.name}, the source of the fork {first.name}, changed on "
                f"{ctx.runner.where} since it was read: plan again",
                backend=ctx.name,
                transient=True,
            )
        source = Source(source.name, source.uid, now.instance.status == "Running")
        todo: list[tuple[DesiredVM, JournalEntry, str]] = []
        for vm in batch.forks:
            try:
                vmops.check_name(ctx, vm.name)
                await refuse_taken(ctx, vm.name)
            except SandError as exc:
                _settle(batch.made[vm.name], exc)
                continue
            uid = new_uid()  # the incarnation, journalled first: recovery adopts only it
            entry = await journal.begin_async(
                "create",
                backend=ctx.name,
                vm=vm.name,
                identity=vm.name,
                image=vm.image,
                uid=uid,
                # The copy carries its source's marker until its own is written: the
                # source's incarnation tells recovery that copy apart.
                via=VIA + source.name,
                source_uid=source.uid,
            )
            todo.append((vm, entry, uid))
        if todo:
            await _stopped_for(ctx, source, todo, batch, journal)


async def _stopped_for(
    ctx: Ctx,
    source: Source,
    todo: list[tuple[DesiredVM, JournalEntry, str]],
    batch: ForkBatch,
    journal: Journal,
) -> None:
    assert batch.restarted is not None
    stopping = journal.begin(
        OP,
        backend=ctx.name,
        vm=todo[0][0].name,
        identity=source.name,
        uid=source.uid,
        was="running" if source.running else "stopped",
        forks=",".join(vm.name for vm, _, _ in todo),
    )
    if source.running:
        try:
            await vmops.stop(ctx, source.name)
        except SandError:
            # Nothing was copied: the forks' entries end; the fork-stop entry stays
            # open (the stop may have happened: the next run starts the source again).
            for _, entry, _ in todo:
                journal.finish(entry, "failed")
            raise
        journal.step(stopping, "stopped")
    try:
        for vm, entry, uid in todo:
            try:
                await _clone(ctx, source, vm)
            except SandError as exc:
                if await cleanup_half_made(ctx, vm.name, source.uid):
                    journal.finish(entry, "failed")
                _settle(batch.made[vm.name], exc)
                continue
            journal.step(entry, "created")
            # This fork goes on (its marker, its start) while the others are copied.
            batch.made[vm.name].set_result(Made(entry, uid, source, batch.restarted))
    finally:
        # Whatever the copies did. A start that fails leaves the entry open: the next
        # run starts the source again (decide_fork_stop).
        if source.running:
            await vmops.start(ctx, source.name)
            journal.step(stopping, "started")
        journal.finish(stopping)


async def _clone(ctx: Ctx, source: Source, vm: DesiredVM) -> None:
    settings = {
        **limayaml.vm_edit_settings(vm, ctx.bundle),
        f"param.{limayaml.PARAM_INSTANCE}": vm.name,
    }
    async with ctx.clone_slots:
        await vmops.limactl(
            ctx,
            "clone",
            source.name,
            vm.name,
            *vmops.set_flags(limayaml.set_expressions(settings)),
            timeout=ctx.timeouts.clone,
        )


def copied_marker(entry: PendingEntry, found: Inspected) -> bool:
    """The instance a fork's create made still carries its source's marker file (the
    clone copied it; the fork's own was never written): a half-made fork."""
    via = str(entry.detail("via") or "")
    side = found.sidecar
    return (
        via.startswith(VIA)
        and side is not None
        and side.marker.identity == via[len(VIA) :]
        and side.uid == str(entry.detail("source_uid") or "")
    )


async def decide_fork_stop(ctx: Ctx, entry: PendingEntry) -> tuple[RecoveryAction, str]:
    """What a fork killed mid-copy leaves its source (limactl children already waited
    for): started again when it ran before and is stopped now, else nothing."""
    name = entry.identity
    forks = str(entry.detail("forks") or entry.vm).split(",")
    fork = ("fork " if len(forks) == 1 else "forks ") + ", ".join(forks)
    found = (await inspect(ctx, name))[name]
    inst = found.instance
    if inst is None:
        return RecoveryAction.NOTHING, f"{name}, the source of the {fork}, is gone"
    if found.sidecar is None or found.sidecar.uid != str(entry.detail("uid") or ""):
        return (
            RecoveryAction.MOOT,
            f"left {name} alone: it is not the instance the {fork} stopped",
        )
    if entry.detail("was") != "running" or inst.status == "Running":
        return RecoveryAction.NOTHING, f"{name} is as the interrupted {fork} found it"
    return RecoveryAction.FINISH, f"start {name} again, stopped by the interrupted {fork}"
