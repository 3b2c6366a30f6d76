"""The one small contract every backend implements.

Observation is read-only and cheap: one listing per backend (one
``GET /cluster/resources`` per Proxmox cluster, one ``limactl list --json`` per
Lima host), deep reads only for VMs whose stored fingerprint differs from the
desired one, that are new, or that are locked. Mutations are few and explicit,
and each is journalled by the backend *before* the call that makes it.

The MUST rules on :class:`Backend` are checked once for every backend kind by
``tests/contract/test_backend.py`` (fakepve, the limactl stand-in locally and on a
remote host over SSH, and the tests' in-memory backend); a new backend is a new rig
there and passes all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sand.backends.capabilities import Capabilities
from sand.desired import DesiredVM
from sand.desired.spec import DesiredBase
from sand.observed import Observation, ObservedBase, ObservedVM, RecordedVM, SecretsRecord

if TYPE_CHECKING:  # named in signatures only: a plan starts without them
    from sand.backends.lease import LeaseBusy, LeaseGrant, LeaseHolder, LeaseRecord
    from sand.guest.endpoint import GuestEndpoint
    from sand.state.journal import Journal, PendingEntry

# Provisions a golden base's build machine, reached at the endpoint (sand.provision).
BaseProvisioner = Callable[[DesiredBase, "GuestEndpoint"], Awaitable[None]]


class RecoveryAction(StrEnum):
    NOTHING = "nothing"  # nothing of the entry is left to do
    MOOT = "moot"  # the VM at that id is not the one the entry acted on: touch nothing
    ADOPT = "adopt"  # the VM is ours and complete enough: keep it, the plan finishes it
    DELETE = "delete"  # remove what the entry left (a half-made VM, a delete cut short)
    LEAVE = "leave"  # would be removed, but is protected or outside the pool: left alone
    WAIT = "wait"  # a task or process of the killed run still runs: apply waits, then decides
    FINISH = "finish"  # complete what the entry started (a replacement's rename)


@dataclass(frozen=True)
class RecoveryDecision:
    """What replaying one unfinished journal entry does, decided from what the backend
    shows now. ``sand plan`` shows these; ``apply`` acts on them, then plans."""

    entry: str  # the journal entry's id
    backend: str
    vm: str
    op: str
    identity: str
    action: RecoveryAction
    summary: str  # "delete half-made clone 123"
    # After it, no VM of ours is at ``identity``: the plan treats that VM as absent.
    absent: bool = False
    # After it, the VM at ``identity`` carries this name (a replacement takes its VM's).
    renamed_to: str = ""

    @property
    def acts(self) -> bool:
        """Whether replaying it changes the backend (or waits for it to change)."""
        return self.action in (RecoveryAction.DELETE, RecoveryAction.WAIT, RecoveryAction.FINISH)

    def to_json_dict(self) -> dict[str, object]:
        return {
            "entry": self.entry,
            "backend": self.backend,
            "vm": self.vm,
            "op": self.op,
            "identity": self.identity,
            "action": self.action.value,
            "summary": self.summary,
            "absent": self.absent,
            "renamed_to": self.renamed_to or None,
        }


@dataclass(frozen=True)
class PreflightItem:
    """One planned change a backend is asked to check before it is shown."""

    vm: DesiredVM
    action: str  # "create" | "replace" | "update"
    fields: tuple[str, ...] = ()  # the fields an update changes
    current: ObservedVM | None = None
    sleep: str = ""  # an idle VM going to sleep: how ("suspended", "stopped"); "": not


@dataclass(frozen=True)
class PreflightProblem:
    """Why a planned change would fail, named by the manifest field that causes it.

    ``field`` is a VM field (``image``, ``memory``, ``disk``, ``cpus``, ``node``)
    unless ``on_backend``: then it is a key of the backend's own block
    (``storage``, ``pool``, ``bridge``, ``template``, ``limactl``).
    """

    vm: str
    field: str
    message: str
    on_backend: bool = False
    backend_field: str | None = None  # where a VM field falls back to (image -> template)
    skip_defaults: bool = False  # the backend does not take this field from ``defaults``


@dataclass(frozen=True)
class PreflightReport:
    problems: tuple[PreflightProblem, ...] = ()
    # Replacements that cannot be made create-before-destroy, with the reason.
    destroy_first: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    requests: int = 0  # API calls / commands spent, for budgets


class Observes(Protocol):
    """What a backend shows: read-only, and cheap."""

    name: str
    type: str
    # What planning must know of this backend type: which desired fields change in
    # place, need a restart or force replacement; whether names are unique.
    capabilities: Capabilities

    @property
    def clone_parallelism(self) -> int:
        """How many VMs this backend clones at once."""

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        """Read-only; one listing, deep reads only where fingerprints differ.

        MUST NOT answer a listing it could not read or trust with an Observation that
        reads as empty: it returns one with ``unknown_reason`` set (and no VMs), or
        raises a :class:`~sand.errors.SandError`, which the session records as unknown.
        An empty answer would plan every VM's re-creation and leave the real ones
        unseen; unknown blocks every change on the backend this run."""
        ...

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        """Read-only: check what planned changes need (image, placement, capacity).

        Called after ``observe`` and only when something would change; it costs a
        bounded number of requests per backend (per distinct template, storage or
        node), never one per VM. A check that cannot be made (no privilege to read
        it) is a warning, not a problem.
        """
        ...


class Lifecycle(Protocol):
    """What a backend does to one VM: each MUST journal first and refuse a VM that is
    not MANAGED."""

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        """Give a managed VM (a replacement made under a temporary name) its final name."""
        ...

    async def create(
        self, vm: DesiredVM, journal: Journal, *, from_base: bool = False, converged: bool = False
    ) -> ObservedVM:
        """Create, configure and start (if desired) a VM; its marker has fingerprint ''.

        ``converged``: nothing follows the create (no provisioning, nothing to finish):
        the VM is left marked as ``mark_converged(vm, made)`` would mark it (no secrets),
        and the caller does not mark it again.

        ``from_base``: clone it from the ready golden base of ``vm.base`` (built earlier
        in this run, or listed ready), and record that base's fingerprint on its marker;
        refused when there is none ready. Otherwise it is made from ``vm.image``.

        MUST journal the intent before the first call that makes anything, and write
        this project's marker (naming the VM's own identity) before the VM is left
        running, so recovery can tell a half-made VM (remove) from a made one (adopt)."""
        ...

    async def update(
        self,
        vm: DesiredVM,
        current: ObservedVM,
        fields: Sequence[str],
        journal: Journal,
        *,
        converged: bool = False,
    ) -> ObservedVM:
        """Change ``fields`` in place (restarting when the policy says so).

        ``converged``: nothing follows the update (no provisioning, no secrets): the VM
        is left marked as ``mark_converged(vm, updated)`` would mark it (the secrets it
        carries kept), which the caller then leaves out.
        MUST refuse a VM that is not MANAGED, before any call that changes it."""
        ...

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        """Stop and remove a managed VM with everything it owns.

        MUST refuse a VM that is not MANAGED (checked again on a fresh read where the
        backend can read it) and MUST succeed, changing nothing, when the VM is already
        gone; a VM it cannot see but that still exists is refused."""
        ...

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        """Write the marker with the desired fingerprints: the VM is in sync.

        ``secrets``: what this run delivered; None keeps the stamp the VM carries.
        MUST refuse a VM that is not MANAGED: a marker is never written on another's."""
        ...

    async def open_to_broker(self, vm: DesiredVM, current: ObservedVM) -> None:
        """Let ``current``'s guest reach the broker where its egress policy would stop it
        (called after the apply granted the VM, before the delivery that uses the
        broker): the way there follows the broker where it listens for the VM now, and
        goes with the VM's last brokered grant. A backend whose guests reach the broker
        whatever their policy (Lima's forward) does nothing."""
        ...

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        """Where to SSH (may wait for the guest agent/boot, at most ``wait`` seconds when
        given). ``vm`` is None for a VM the manifest no longer names (a sweep before
        deleting it): the login user then comes from what the backend recorded."""
        ...


class GoldenBases(Protocol):
    """The golden bases a backend builds VMs from."""

    async def build_base(
        self, base: DesiredBase, provision: BaseProvisioner, journal: Journal
    ) -> ObservedBase:
        """Build golden base ``base``: a machine made from ``base.source``, started, handed
        to ``provision``, stopped and frozen, then marked ready with its fingerprint.

        MUST journal the build before its first call, and MUST NOT mark it ready (the
        only state a VM is cloned from) until it is frozen: a build cut short leaves a
        base that is never cloned from, and that recovery or the next plan removes."""
        ...

    async def delete_base(self, base: ObservedBase, journal: Journal) -> str:
        """Delete a golden base the plan found unused; what was done, in words.

        MUST re-check on a fresh read first and keep it (saying why, not raising) when
        a VM made from it exists now or something holds it (a lock, a clone running);
        MUST refuse one that does not carry this project's base marker for this entry."""
        ...


class Recovers(Protocol):
    """What a crashed run left, decided and settled."""

    async def decide_recovery(self, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
        """What replaying ``entry`` (left by a crashed run) would do; changes nothing.

        With ``wait`` (apply), tasks and processes the killed run left running are awaited
        (bounded) first; without it (plan), such an entry is decided as WAIT. For an
        interrupted create it MUST decide DELETE for a VM of this entry that carries no
        marker yet, ADOPT for one carrying this project's marker, and MOOT for anything
        else at that identity (never touched)."""
        ...

    async def act_recovery(self, entry: PendingEntry, decision: RecoveryDecision) -> str:
        """Carry out ``decision`` (identity re-checked first); say what was done. It MUST
        NOT settle the entry: only the journal replay does, after this returns."""
        ...

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        """For recorded VMs the listing did not show, checked by id: identity → None when
        confirmed gone, else why it is believed to still exist."""
        ...


class Leases(Protocol):
    """One writer per project."""

    def lease(
        self,
        holder: LeaseHolder,
        *,
        ttl: float,
        wait: float = 0.0,
        on_wait: Callable[[LeaseBusy], None] | None = None,
    ) -> AbstractAsyncContextManager[LeaseGrant]:
        """Hold this project's lease on this backend for the body (see
        :mod:`sand.backends.lease`): taken before the first change, renewed while held,
        released at the end. A busy one is waited for up to ``wait`` seconds.

        MUST NOT cost a no-op run anything: nothing of it is read or written until it
        is taken, and ``observe`` stays one listing."""
        ...

    async def lease_record(self) -> LeaseRecord | None:
        """Read-only: the project's lease as stored (None: never taken), for ``sand
        status``."""
        ...


@runtime_checkable
class Backend(Observes, Lifecycle, GoldenBases, Recovers, Leases, Protocol):
    """A place VMs live. Implementations: ``sand.backends.proxmox``, ``sand.backends.lima``.

    Rules every implementation MUST keep (each names the contract test that checks it,
    in ``tests/contract/test_backend.py``):

    1. Create then observe: a VM ``create`` made is listed by the next ``observe`` of a
       fresh backend as MANAGED, under the identity ``create`` returned, with
       fingerprint ``""`` until ``mark_converged``; after it, with the desired
       fingerprint, so the plan is a no-op
       (``test_create_then_observe_then_mark_converged_plans_a_no_op``).
    2. Delete of a missing VM succeeds: a VM already gone (deleted behind sand's back,
       or by a delete whose answer was lost) is deleted; nothing is journalled for it.
       A VM that is merely out of sight (it still exists) is refused, never reported
       gone (``test_a_delete_removes_the_vm_and_a_missing_vm_is_already_deleted``).
    3. Only managed VMs are changed: ``delete``, ``update``, ``rename`` and
       ``mark_converged`` refuse (a :class:`~sand.errors.SandError` saying
       "refusing") any VM whose ownership is not MANAGED — a person's VM, another
       project's, a copy of one of ours (its marker names another identity) — and
       change nothing on it (``test_a_vm_that_is_not_ours_is_refused_by_every_mutation``).
    4. Every mutation is journalled before its first call; an interrupted one leaves
       its entry open, and ``decide_recovery`` then removes what it half made (no
       marker yet) or adopts what carries this run's marker; only the journal replay
       settles entries (``test_recovery_of_an_interrupted_create_removes_or_adopts_it``).
    5. A backend that cannot be read is unknown, never empty
       (``test_a_backend_that_cannot_be_read_is_unknown_never_empty``).
    6. One writer per project: while one holder (any process, any host) holds a
       project's ``lease``, another waits for it and then fails with
       :class:`~sand.backends.lease.LeaseBusy` naming the holder; of two takers at once
       exactly one wins; after a release the next is granted
       (``test_a_second_taker_waits_then_is_told_who_holds_the_lease``,
       ``test_of_two_takers_at_once_exactly_one_wins``).
    7. A lease expires: one whose holder was killed (kill -9) on another host is granted
       to the next taker once its ttl (and a little grace) has passed, and that grant is
       not fresh; one killed on this host is granted at once
       (``test_the_lease_of_a_killed_holder_expires``,
       ``test_a_holder_killed_on_this_host_is_seen_gone_at_once``).
    8. A grant is fresh only when nobody else held the lease since this backend's last
       ``observe``; the lease is no VM (no listing shows it) and taking it changes none
       (``test_a_grant_is_fresh_only_when_nobody_wrote_since_the_observation``).
    9. Golden bases: ``observe`` lists this project's bases of this backend entry
       (``Observation.bases``), each with the VMs the listing shows as made from it; a
       VM is only ever cloned from a base that is ``ready`` (built and frozen), and a
       base is only deleted when no VM was made from it, nothing holds it, and it
       carries this project's base marker for this entry
       (``tests/contract/test_golden_bases.py``).
    """

    async def close(self) -> None: ...
