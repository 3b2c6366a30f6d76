"""The one small contract every backend implements.

Observation is read-only and cheap: one listing per backend (one
``GET /cluster/resources`` per Proxmox cluster, one ``limactl list --json`` per
Lima host), deep reads only for VMs whose stored fingerprint differs from the
desired one, that are new, or that are locked. Mutations are few and explicit,
and each is journalled by the backend *before* the call that makes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sand.backends.capabilities import Capabilities
from sand.desired import DesiredVM
from sand.guest.endpoint import GuestEndpoint
from sand.observed import Observation, ObservedVM, RecordedVM, SecretsRecord

if TYPE_CHECKING:
    from sand.state.journal import Journal, PendingEntry


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


@runtime_checkable
class Backend(Protocol):
    """A place VMs live. Implementations: ``sand.backends.proxmox``, ``sand.backends.lima``."""

    name: str
    type: str
    # What planning must know of this backend type: which desired fields change in
    # place, need a restart or force replacement; whether names are unique.
    capabilities: Capabilities
    clone_parallelism: int

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        """Read-only; one listing, deep reads only where fingerprints differ."""
        ...

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        """Read-only: check what planned changes need (image, placement, capacity).

        Called after ``observe`` and only when something would change; it costs a
        bounded number of requests per backend (per distinct template, storage or
        node), never one per VM. A check that cannot be made (no privilege to read
        it) is a warning, not a problem.
        """
        ...

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        """Give a managed VM (a replacement made under a temporary name) its final name."""
        ...

    async def create(self, vm: DesiredVM, journal: Journal) -> ObservedVM:
        """Create, configure and start (if desired) a VM; its marker has fingerprint ''."""
        ...

    async def update(
        self, vm: DesiredVM, current: ObservedVM, fields: Sequence[str], journal: Journal
    ) -> ObservedVM:
        """Change ``fields`` in place (restarting when the policy says so)."""
        ...

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        """Stop and remove a managed VM with everything it owns."""
        ...

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        """Write the marker with the desired fingerprints: the VM is in sync.

        ``secrets``: what this run delivered; None keeps the stamp the VM carries."""
        ...

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        """Where to SSH (may wait for the guest agent/boot, at most ``wait`` seconds when
        given). ``vm`` is None for a VM the manifest no longer names (a sweep before
        deleting it): the login user then comes from what the backend recorded."""
        ...

    async def decide_recovery(self, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
        """What replaying ``entry`` (left by a crashed run) would do; changes nothing.

        With ``wait`` (apply), tasks and processes the killed run left running are awaited
        (bounded) first; without it (plan), such an entry is decided as WAIT."""
        ...

    async def act_recovery(self, entry: PendingEntry, decision: RecoveryDecision) -> str:
        """Carry out ``decision`` (identity re-checked first); say what was done. Only the
        journal replay settles the entry."""
        ...

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        """For recorded VMs the listing did not show, checked by id: identity → None when
        confirmed gone, else why it is believed to still exist."""
        ...

    async def close(self) -> None: ...
