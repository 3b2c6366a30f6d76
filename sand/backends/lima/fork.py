"""A fork on Lima: ``limactl clone`` of another instance of this project.

``limactl clone`` copies a *stopped* instance (Lima's ``pkg/instance/clone.go`` refuses
a running one), so a running source is stopped for the copy and started again after
it, whatever the copy did. The order:

1. the fork's ``create`` entry (``via: fork:<source>``, the fork's incarnation and the
   source's) and a ``fork-stop`` entry on the source (its incarnation, whether it was
   running) are journalled before any call;
2. ``limactl stop <source>`` (only when it runs);
3. ``limactl clone <source> <fork>`` with the fork's settings (the ``create`` entry's
   step ``created``);
4. ``limactl start <source>`` when it was running; then the ``fork-stop`` entry ends.

A run killed anywhere leaves the ``fork-stop`` entry open: the next run (and ``plan``,
which shows it) waits for the limactl children the killed run left, then starts the
source again if it is still stopped (:func:`decide_fork_stop`). The copy carries the
source's marker file (clone copies every file) until the fork's own is written; the
``create`` entry's recovery removes such a copy (``recover._decide_create``).

Two forks of one source in one run take turns (a lock per source): each stops, copies
and starts the source. The source is otherwise untouched: no edit, no marker write.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sand.backends.lima import limayaml, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.marker import classify
from sand.backends.lima.observe import Inspected, inspect
from sand.backends.protocol import RecoveryAction
from sand.desired import DesiredVM
from sand.errors import BackendError
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


def source_lock(ctx: Ctx, source: str) -> asyncio.Lock:
    """One fork at a time per source: each stops it, copies it and starts it again."""
    return ctx.fork_locks.setdefault(source, asyncio.Lock())


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


async def copy(
    ctx: Ctx, vm: DesiredVM, source: Source, journal: Journal, create: JournalEntry
) -> None:
    """Stop the source (when it runs), clone it into ``vm.name``, start it again; one
    fork of a source at a time, its power read again once it is this fork's turn."""
    async with source_lock(ctx, source.name):
        now = (await inspect(ctx, source.name))[source.name]
        if now.instance is None or now.sidecar is None or now.sidecar.uid != source.uid:
            raise BackendError(
                f"{source.name}, the source of the fork {vm.name}, changed on "
                f"{ctx.runner.where} since it was read: plan again",
                backend=ctx.name,
                transient=True,
            )
        running = now.instance.status == "Running"
        await _copy(ctx, vm, Source(source.name, source.uid, running), journal, create)


async def _copy(
    ctx: Ctx, vm: DesiredVM, source: Source, journal: Journal, create: JournalEntry
) -> None:
    stopping = journal.begin(
        OP,
        backend=ctx.name,
        vm=vm.name,
        identity=source.name,
        uid=source.uid,
        was="running" if source.running else "stopped",
    )
    if source.running:
        await vmops.stop(ctx, source.name)
        journal.step(stopping, "stopped")
    try:
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
        journal.step(create, "created")
    finally:
        # Whatever the copy did. A start that fails leaves the entry open: the next run
        # starts the source again (decide_fork_stop).
        if source.running:
            await vmops.start(ctx, source.name)
            journal.step(stopping, "started")
        journal.finish(stopping)


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
    name, fork = entry.identity, entry.vm
    found = (await inspect(ctx, name))[name]
    inst = found.instance
    if inst is None:
        return RecoveryAction.NOTHING, f"{name}, the source of the fork {fork}, is gone"
    if found.sidecar is None or found.sidecar.uid != str(entry.detail("uid") or ""):
        return (
            RecoveryAction.MOOT,
            f"left {name} alone: it is not the instance the fork {fork} stopped",
        )
    if entry.detail("was") != "running" or inst.status == "Running":
        return RecoveryAction.NOTHING, f"{name} is as the interrupted fork {fork} found it"
    return RecoveryAction.FINISH, f"start {name} again, stopped by the interrupted fork {fork}"
