"""Replacing a VM without losing it: the new one is proven before the old one goes.

Create-before-destroy (the default): the replacement is created under a
temporary name, booted and provisioned, the ``preserve:`` paths are carried over
from the old guest and verified, the old guest is swept one last time for
unpushed work — and only then is the old VM deleted and the new one renamed to
its name. Any failure before that point removes the half-made replacement and
leaves the old VM running and untouched; the journal entry ("replace") lets the
next run finish or undo what a crash interrupted.

Destroy-before-create is used only when the backend cannot hold both (the plan
says so and why): the preserved paths are archived on this host first, and the
archive is kept if anything after the delete fails, so the next create of that
VM restores it.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sand.apply.events import Phase, Steps
from sand.backends.protocol import Backend, RecoveryAction, RecoveryDecision
from sand.desired import DesiredVM
from sand.errors import SandError
from sand.logs import get_logger
from sand.manifest.names import TEMP_SUFFIX
from sand.observed import ObservedVM, Ownership, SecretsRecord
from sand.plan.model import Strategy, VMChange
from sand.state.journal import Journal, JournalEntry, PendingEntry
from sand.survey.recovered import standing

if TYPE_CHECKING:
    from sand.provision.preserve import Archive

Provisioner = Callable[[DesiredVM, Backend, ObservedVM, VMChange], Awaitable[SecretsRecord | None]]
Replaced = tuple[ObservedVM, SecretsRecord | None]  # the new VM, and what it was given
Guard = Callable[[Backend, DesiredVM | None, ObservedVM, Sequence[str]], Awaitable[None]]
Say = Steps  # this VM's reporter


@dataclass(frozen=True)
class ReplaceKit:
    """What a replacement needs besides the backend: provisioning, the last-look guard
    and where preserve archives are kept (sand's state dir for the project)."""

    provisioner: Provisioner
    guard: Guard | None
    archives: Path | None


def temp_name(name: str, op: str) -> str:
    """A name no manifest VM has: ``<name>-sandnew<4 hex>``, short enough for every backend."""
    tag = hashlib.sha256(op.encode()).hexdigest()[:4]
    suffix = f"{TEMP_SUFFIX}{tag}"
    return name[: 63 - len(suffix)].rstrip("-._") + suffix


def kept_archive(kit: ReplaceKit, vm: str) -> Path | None:
    """Where the archive of a replacement that lost its old VM is kept for the next create."""
    return kit.archives / f"{vm}.kept.tar" if kit.archives is not None else None


async def replace_vm(
    change: VMChange, backend: Backend, journal: Journal, kit: ReplaceKit, say: Say
) -> Replaced:
    assert change.desired is not None and change.observed is not None
    if change.strategy is Strategy.DESTROY_BEFORE_CREATE:
        return await _destroy_first(change, backend, journal, kit, say)
    return await _create_first(change, backend, journal, kit, say)


async def _create_first(
    change: VMChange, backend: Backend, journal: Journal, kit: ReplaceKit, say: Say
) -> Replaced:
    vm, old = change.desired, change.observed
    assert vm is not None and old is not None
    temp = temp_name(vm.name, uuid.uuid4().hex)
    entry = await journal.begin_async(
        "replace",
        backend=backend.name,
        vm=vm.name,
        identity=old.identity,
        strategy=Strategy.CREATE_BEFORE_DESTROY.value,
        old_uid=old.details.get("uid", ""),
        old_incarnation=old.marker.incarnation if old.marker is not None else "",
        temp=temp,
    )
    new: ObservedVM | None = None
    delivered: SecretsRecord | None = None
    deleting = False
    try:
        say(Phase.CREATING, f"creating the replacement as {temp}")
        # Never protected while it is only a candidate: a failure must be able to remove it
        # (protection is set at the end, as for every create).
        new = await backend.create(
            replace(vm, name=temp, protect=False), journal, from_base=change.base is not None
        )
        journal.step(entry, "created", new=new.identity)
        delivered = await _provision(vm, backend, new, change, kit, say)
        if vm.preserve:
            say(Phase.PRESERVING, "carrying preserve: paths to the replacement")
            await carry_over(backend, vm, old, new, kit, tag=entry.id)
            journal.step(entry, "preserved")
            # Re-assert the files sand itself manages over what was restored.
            delivered = await _provision(vm, backend, new, change, kit, say) or delivered
        if kit.guard is not None:
            say(Phase.GUARDING, "last look for unpushed work on the old VM")
            await kit.guard(backend, vm, old, vm.preserve)
        say(Phase.DELETING, "deleting the old VM")
        deleting = True
        # From here the replacement is the VM: a crash during the delete must never be
        # settled by removing it (recovery decides from whether the old VM still exists).
        journal.step(entry, "deleting-old")
        await backend.delete(old, journal)
    except (SandError, OSError):
        if not deleting or await _old_still_there(backend, vm, old):
            await _discard(backend, vm, temp, journal, entry)
            raise
        # The old VM is gone after all (its delete failed late): finish with the new one.
        if new is None:
            raise
    journal.step(entry, "old-deleted")
    say(Phase.RENAMING, f"renaming {temp} to {vm.name}")
    renamed = await backend.rename(new, vm.name, journal)
    journal.step(entry, "renamed")
    journal.finish(entry)
    return renamed, delivered


async def _destroy_first(
    change: VMChange, backend: Backend, journal: Journal, kit: ReplaceKit, say: Say
) -> Replaced:
    vm, old = change.desired, change.observed
    assert vm is not None and old is not None
    entry = await journal.begin_async(
        "replace",
        backend=backend.name,
        vm=vm.name,
        identity=old.identity,
        strategy=Strategy.DESTROY_BEFORE_CREATE.value,
        old_uid=old.details.get("uid", ""),
    )
    archive = None
    try:
        if vm.preserve:
            say(Phase.PRESERVING, "archiving preserve: paths on this host")
            archive = await _archive(backend, vm, old, kit, kept=True)
            journal.step(entry, "archived", files=archive.files)
        if kit.guard is not None:
            await kit.guard(backend, vm, old, vm.preserve)
        say(Phase.DELETING, "deleting the old VM (the backend cannot hold both)")
        await backend.delete(old, journal)
    except (SandError, OSError):
        if archive is not None:
            archive.remove()  # the old VM still has it all
        journal.finish(entry, "failed")
        raise
    journal.step(entry, "old-deleted")
    say(Phase.CREATING, "creating the replacement")
    new = await backend.create(
        replace(vm, protect=False), journal, from_base=change.base is not None
    )
    journal.step(entry, "created", new=new.identity)
    delivered = await _provision(vm, backend, new, change, kit, say)
    if archive is not None:
        await restore_kept(backend, vm, new, kit, say)
        delivered = await _provision(vm, backend, new, change, kit, say) or delivered
    journal.finish(entry)
    return new, delivered


async def restore_kept(
    backend: Backend, vm: DesiredVM, new: ObservedVM, kit: ReplaceKit, say: Say
) -> bool:
    """Restore the archive a destroy-before-create kept for ``vm``, if there is one."""
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.provision.preserve import Archive, read_entries, relative_roots, restore_in

    path = kept_archive(kit, vm.name)
    if path is None or not path.exists() or not vm.preserve:
        return False
    say(Phase.PRESERVING, f"restoring preserve: paths from {path}")
    archive = Archive(path, relative_roots(vm.preserve), read_entries(path))
    await restore_in(await backend.endpoint(vm, new), vm.user, archive)
    archive.remove()
    get_logger().info("preserve.restored", vm=vm.name, files=archive.files)
    return True


async def carry_over(
    backend: Backend, vm: DesiredVM, old: ObservedVM, new: ObservedVM, kit: ReplaceKit, tag: str
) -> None:
    """Old guest → host file (0600) → new guest, verified; the file is removed after."""
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.provision.preserve import restore_in

    archive = await _archive(backend, vm, old, kit, kept=False, tag=tag)
    try:
        await restore_in(await backend.endpoint(vm, new), vm.user, archive)
    finally:
        archive.remove()


async def _archive(
    backend: Backend, vm: DesiredVM, old: ObservedVM, kit: ReplaceKit, *, kept: bool, tag: str = ""
) -> Archive:
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.provision.preserve import PreserveError, archive_out

    if kit.archives is None:
        raise PreserveError("no state directory to keep preserved paths in")
    path = kept_archive(kit, vm.name) if kept else kit.archives / f"{vm.name}.{tag[:12]}.tar"
    assert path is not None
    if kept and path.exists():
        raise PreserveError(
            f"an archive of {vm.name}'s preserved paths from an earlier failed replace is "
            f"still kept at {path}; restore or remove it first"
        )
    return await archive_out(await backend.endpoint(vm, old), vm.user, vm.preserve, path)


async def _provision(
    vm: DesiredVM, backend: Backend, new: ObservedVM, change: VMChange, kit: ReplaceKit, say: Say
) -> SecretsRecord | None:
    if not vm.provision:
        return None
    say(Phase.PROVISIONING, "provisioning the replacement")
    return await kit.provisioner(vm, backend, new, change)


async def _old_still_there(backend: Backend, vm: DesiredVM, old: ObservedVM) -> bool:
    with contextlib.suppress(SandError):
        obs = await backend.observe([vm])
        if obs.unknown_reason is None:
            return any(o.identity == old.identity for o in obs.vms)
    return True  # cannot tell: assume it is there, and keep it


async def _discard(
    backend: Backend, vm: DesiredVM, temp: str, journal: Journal, entry: JournalEntry
) -> None:
    """Remove the half-made replacement; if that fails too, the journal keeps the entry
    open and the next run removes it (the old VM is never touched by either)."""
    try:
        obs = await backend.observe([replace(vm, name=temp)])
        for made in obs.vms:
            if made.name == temp and made.ownership is Ownership.MANAGED:
                await backend.delete(made, journal)
    except SandError as exc:
        get_logger().error("replace.cleanup_failed", vm=vm.name, temp=temp, error=str(exc))
        return
    journal.finish(entry, "failed")


async def act_replace(
    entry: PendingEntry, backend: Backend, journal: Journal, decision: RecoveryDecision
) -> str:
    """Carry out a decision after looking again: a replacement is removed only while the
    old VM is still there, and renamed only once it is gone."""
    if decision.action not in (RecoveryAction.DELETE, RecoveryAction.FINISH):
        return decision.summary
    temp = str(entry.detail("temp") or "")
    now = await standing(entry, backend, frozenset())
    if now.made is None or now.made.identity != decision.identity:
        return f"{decision.summary}: nothing to do any more"
    if now.old_present:
        await backend.delete(now.made, journal)
        return f"removed the unfinished replacement {temp}"
    await backend.rename(now.made, decision.vm, journal)
    return f"renamed the replacement {temp} to {decision.vm}"
