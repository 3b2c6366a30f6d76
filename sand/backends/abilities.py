"""Abilities a backend may have besides :class:`~sand.backends.protocol.Backend`:
asked with ``isinstance``, never ``getattr``. Each is a small protocol of its own, so a
backend that lacks one is simply not an instance of it (the in-memory test backend,
``tests/memory_backend``, has some and not others)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sand.backends.capabilities import Capabilities
from sand.backends.protocol import Backend
from sand.desired import DesiredVM
from sand.observed import ObservedVM

if TYPE_CHECKING:
    from sand.backends.doctor import DoctorReport
    from sand.state.journal import Journal


@runtime_checkable
class ListsEarly(Protocol):
    """A backend that can send its listing before the plan asks for it (``sand plan``)."""

    def send_listing(self) -> None:
        """Send the listing now; the next ``observe`` takes its answer."""


@runtime_checkable
class Diagnoses(Protocol):
    """``sand doctor``: checks of the backend's setup (privileges, versions, paths)."""

    async def doctor(self, desired: Sequence[DesiredVM] = ()) -> DoctorReport:
        """``desired``: the manifest's VMs on this backend, for the checks only some
        VMs need (a fork needs the privilege to snapshot its source)."""
        ...


@runtime_checkable
class Warns(Protocol):
    """What the backend reported while applying (a PVE task's "WARNINGS: n")."""

    @property
    def warnings(self) -> list[str]: ...


@runtime_checkable
class Sleeps(Protocol):
    """Idle VMs put to sleep and woken (``idle:``, ``sand sleep``, ``sand wake``).

    ``how`` is "suspended" (hibernated to disk: memory, processes and tmux sessions
    kept; only a backend whose capabilities say ``suspends``) or "stopped". Both MUST
    journal first and refuse a VM that is not MANAGED, and a VM already as asked is
    left as it is (``test_a_vm_that_is_not_ours_is_refused_by_every_mutation``,
    ``test_sleep_then_wake_and_the_plan_sees_it_asleep_only_where_said``)."""

    async def sleep(
        self, current: ObservedVM, how: str, journal: Journal, *, by: str = "idle"
    ) -> None:
        """Put ``current`` to sleep ``how``, marking on the VM itself how, since when and
        by whose decision (``by``: "idle", "person"; ``ObservedVM.slept``), for every
        host to read; a wake takes the mark off."""
        ...

    async def wake(self, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
        """Resume a hibernated VM, start a stopped one; one already running is fine."""
        ...


@runtime_checkable
class ClaimsSpares(Protocol):
    """Warm pools (``pools:``): a new VM takes a spare's place where it is.

    ``claim`` turns the spare ``spare`` (MANAGED, carrying its pool's marker) into VM
    ``vm``: its name and marker become ``vm``'s (fingerprint not converged, pool role
    gone), nothing else; no clone, no boot. It MUST journal first and leave either the
    spare or ``vm``, never both or neither, however it is interrupted (one write), and
    refuse a VM that is not a spare of ``vm``'s pool. Provisioning follows as for a
    new VM."""

    async def claim(self, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM: ...


@runtime_checkable
class CopiesForksTogether(Protocol):
    """A backend that stops a fork's source for the copy (Lima) copies the forks one
    apply makes of one source with one stop of it; the apply names them before any
    create (``expect_forks``), each still created by its own ``create`` call."""

    def expect_forks(self, forks: Sequence[DesiredVM]) -> None: ...


def capabilities_of(backend: Backend | type[Backend]) -> Capabilities:
    """What the planner may plan on ``backend`` (an instance or its class): its declared
    field policy and kinds of fork, and what it can do at all read off the abilities it
    implements (sleeps, claims): one declaration, the method, so the plan never promises
    what the engine would refuse."""
    kind = backend if isinstance(backend, type) else type(backend)
    # An instance's own (what its configuration allows, e.g. a declared egress proxy)
    # before its type's.
    declared = backend.capabilities
    return replace(declared, sleeps=issubclass(kind, Sleeps), claims=issubclass(kind, ClaimsSpares))
