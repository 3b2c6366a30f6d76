"""A person's own decision on a VM's sleep (``sand wake VM``, ``sand sleep VM``), and
the wake every use makes first (``sand shell``, ``cp``, ``land``, the board's keys).

A VM asleep (hibernated by its idle policy, stopped for idle, or put to sleep by
``sand sleep``) is woken before it is used, and the person is told so ("waking
agent-1, asleep since 14:02"): a shell that silently waited a minute for a resume
reads as a hang. The backend's own ``wake`` journals first and refuses a VM that is
not the managed VM observed; this host's sleep record is forgotten once it is awake.

Both take the project's lease on the VM's backend, as an apply does before it changes a
VM: a ``sand sync`` or a watch elsewhere may be carrying out a plan for this very VM
(putting it to sleep, replacing it), and a wake racing it would start what it stops.
A busy lease is waited for (:data:`LEASE_WAIT`, saying so); a lease another applier
held since the VM was observed sends the VM to be observed again, under the lease.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from sand.audit.trail import record as audit_record
from sand.backends.abilities import Sleeps
from sand.backends.lease import DEFAULT_TTL, LeaseBusy, LeaseHolder
from sand.backends.protocol import Backend
from sand.broker.client import grant_vm
from sand.desired import DesiredVM
from sand.errors import BackendError, ErrorLayer, SandError
from sand.observed import STOPPED, SUSPENDED, ObservedVM, Ownership
from sand.plan.idle import Asleep, asleep_of, saved_or_stopped
from sand.plan.render import asleep_words
from sand.project import Session, observe_all
from sand.state.asleep import SleepRecord, forget_asleep, remember_asleep
from sand.survey.idle import asleep_records
from sand.terminal import one_line

Note = Callable[[str], None]

# Seconds a wake or a sleep waits for another applier's lease (a sync's run is minutes
# at most); then it fails as an apply would, naming the holder.
LEASE_WAIT = 120.0


class PowerRefused(SandError):
    layer = ErrorLayer.VERBS


async def find_vm(session: Session, manifest: str, name: str) -> tuple[DesiredVM, ObservedVM]:
    """The declared VM ``name`` and the one managed VM its backend shows for it."""
    vm = next((v for v in session.desired.vms if v.name == name), None)
    if vm is None:
        known = ", ".join(v.name for v in session.desired.vms) or "none"
        raise PowerRefused(f"{manifest} declares no VM named {name!r} (VMs: {known})")
    return vm, await _observe(session, vm)


async def _observe(session: Session, vm: DesiredVM) -> ObservedVM:
    name = vm.name
    backend = session.backends[vm.backend]
    obs = (await observe_all({vm.backend: backend}, session.desired))[vm.backend]
    if obs.unknown_reason:
        raise BackendError(obs.unknown_reason, backend=vm.backend)
    managed = [o for o in obs.vms if o.name == name and o.ownership is Ownership.MANAGED]
    if not managed:
        raise PowerRefused(f"VM {name} does not exist yet on {vm.backend}: run sand apply")
    if len(managed) > 1:
        ids = ", ".join(o.identity for o in managed)
        raise PowerRefused(f"several managed VMs on {vm.backend} are named {name}: {ids}")
    return managed[0]


@contextlib.asynccontextmanager
async def leased(
    session: Session, vm: DesiredVM, current: ObservedVM, note: Note | None, command: str
) -> AsyncIterator[ObservedVM]:
    """Hold the project's lease on ``vm``'s backend for the body, as an apply holds it
    to change a VM; yields the VM as it is under the lease (observed again when another
    applier held the lease since ``current`` was observed)."""

    def waiting(busy: LeaseBusy) -> None:
        if note is not None:
            note(f"waiting (up to {LEASE_WAIT:.0f}s): {busy}")

    holder = LeaseHolder.here(command=command)
    backend = session.backends[vm.backend]
    async with backend.lease(holder, ttl=DEFAULT_TTL, wait=LEASE_WAIT, on_wait=waiting) as grant:
        yield current if grant.fresh else await _observe(session, vm)


def asleep(session: Session, current: ObservedVM) -> Asleep | None:
    return asleep_of(current, asleep_records(session.project).get(current.name))


async def wake_if_asleep(
    session: Session, vm: DesiredVM, current: ObservedVM, note: Note | None
) -> ObservedVM:
    """``current`` awake: woken first when it sleeps (saying so), else as it is."""
    if asleep(session, current) is None:
        return current
    backend = _sleeper(session.backends[vm.backend], vm.backend)
    async with leased(session, vm, current, note, "wake") as current:
        sleeping = asleep(session, current)
        if sleeping is None:
            return current  # another applier woke it (or changed it) meanwhile
        if note is not None:
            note(f"waking {vm.name}, {asleep_words(sleeping)}")
        # Forgotten before the wake, as the backend takes its mark off first: a wake
        # killed midway must not leave this host's record to call a later stop a sleep.
        forget_asleep(session.project, vm.backend, vm.name)
        await backend.wake(vm, current, session.journal)
        audit_record("vm.woken", project=session.project, vm=vm.name, backend=vm.backend, by="use")
    awake = replace(current, power="running", lock=None)
    await _secrets_again(session, vm, awake, note)
    return awake


async def _secrets_again(
    session: Session, vm: DesiredVM, current: ObservedVM, note: Note | None
) -> None:
    """A stop emptied the guest's tmpfs, and the scrub before a hibernation removed them
    from the memory it saved: its secrets are delivered again before it is used (a
    ``--memory`` fork's copy never held them). A delivery that cannot be made
    now (a secret this shell cannot read) does not stop the use: the person is told,
    and the next apply delivers them (it sees the boot after the last delivery)."""
    if not vm.provision or not vm.delivers_secrets:
        return
    from sand.provision import deliver_secrets  # asyncssh: only when there are secrets
    from sand.survey.guest_secrets import GuestSecrets

    try:
        values = GuestSecrets(session).for_vm(vm)
        endpoint = await session.backends[vm.backend].endpoint(vm, current)
        jump = endpoint.jump is not None
        broker = grant_vm(session.project, vm, endpoint.host, jump, values)
        await deliver_secrets(endpoint, vm, values, broker=broker)
    except SandError as exc:
        if note is not None:
            note(
                f"{vm.name}: its secrets were not delivered again ({one_line(str(exc), 200)}); "
                "the next sand apply delivers them"
            )


async def sleep_now(
    session: Session,
    vm: DesiredVM,
    current: ObservedVM,
    *,
    stop: bool = False,
    force: bool = False,
    note: Note | None = None,
) -> str:
    """Put ``vm`` to sleep by a person's decision: hibernated where the backend can
    (unless ``stop``), else stopped. Returns how. Refused, naming them, while an agent
    works or a person is attached (or that cannot be told), unless ``force``."""
    backend = session.backends[vm.backend]
    sleeper = _sleeper(backend, vm.backend)
    async with leased(session, vm, current, note, "sleep") as current:
        if asleep(session, current) is not None or current.power != "running":
            raise PowerRefused(
                f"VM {vm.name} is not running ({current.power}): nothing to put to sleep"
            )
        how = SUSPENDED if backend.capabilities.suspends and not stop else STOPPED
        if not force and vm.provision:  # a guest sand did not provision is not asked
            await _refuse_in_use(vm, current, backend, how)
        how = await _scrubbed(session, vm, current, how, note)
        await sleeper.sleep(current, how, session.journal, by="person")
        record = SleepRecord(vm.backend, vm.name, current.identity, how, time.time(), "person")
        remember_asleep(session.project, record)
        audit_record(
            "vm.slept",
            project=session.project,
            vm=vm.name,
            backend=vm.backend,
            how=how,
            by="person",
            force=force,
        )
    return how


async def _scrubbed(
    session: Session, vm: DesiredVM, current: ObservedVM, how: str, note: Note | None
) -> str:
    """Before a hibernation, the delivered secrets removed from the guest's memory; a
    stop instead when it still holds what sand cannot remove, unless ``keepMemory``."""
    if how != SUSPENDED or not vm.provision:
        return how
    from sand.provision import scrub_memory  # asyncssh: only when a guest is asked

    endpoint = await session.backends[vm.backend].endpoint(vm, current)
    left = (await scrub_memory(endpoint, vm)).left
    chosen = saved_or_stopped(how, left, vm.idle)
    if chosen != how and note is not None:
        note(f"{vm.name}: stopped, not hibernated: its memory holds {', '.join(left)}")
    return chosen


async def _refuse_in_use(vm: DesiredVM, current: ObservedVM, backend: Backend, how: str) -> None:
    from sand.verbs.inuse import Unknown, in_use  # asyncssh: only when a guest is asked

    verb = "hibernate" if how == SUSPENDED else "stop"
    try:
        users = await in_use(vm, current, backend, how)
    except Unknown as exc:
        raise PowerRefused(
            f"not putting {vm.name} to sleep: whether anyone uses it could not be told "
            f"({exc}); --force to {verb} it anyway"
        ) from exc
    if users:
        raise PowerRefused(
            f"not putting {vm.name} to sleep: in use by {', '.join(users)}; "
            f"--force to {verb} it anyway"
        )


def _sleeper(backend: Backend, name: str) -> Sleeps:
    if not isinstance(backend, Sleeps):
        raise BackendError("this backend cannot put VMs to sleep or wake them", backend=name)
    return backend
