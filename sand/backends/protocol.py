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

from sand.desired import DesiredVM

if TYPE_CHECKING:
    from sand.state.journal import Journal


class Ownership(StrEnum):
    MANAGED = "managed"  # our marker: this project, and the VM's own identity
    UNMANAGED = "unmanaged"  # no marker: a human's VM, never touched
    COPIED = "copied"  # our marker naming another identity: a human's clone of ours
    OTHER_PROJECT = "other-project"  # sand's marker for another project
    # This project's marker naming another backend entry of the manifest (two entries on
    # one cluster or host): that entry's VM, never deleted or adopted by this one.
    OTHER_BACKEND = "other-backend"


class Mutability(StrEnum):
    IN_PLACE = "in-place"
    RESTART = "in-place, requires restart"
    GROW_ONLY = "in-place when growing, replace when shrinking"
    REPLACE = "forces replacement"


# Fields the planner compares, and whether the guest itself must be reprovisioned.
INFRA_FIELDS = ("image", "cpus", "memory", "disk", "state", "protect", "node", "ports")


@dataclass(frozen=True)
class Marker:
    """What sand writes on a VM it owns (PVE tags + description, Lima sidecar)."""

    project: str
    name: str
    identity: str  # the VM's own id (PVE vmid, Lima instance name): a copy fails this
    fingerprint: str  # DesiredVM.fingerprint last converged; "" while being created
    guest_fingerprint: str = ""  # DesiredVM.guest_fingerprint last provisioned
    image: str = ""
    # The secrets stamp last delivered (sand.secrets.stamp; "" = none recorded)
    # and when that delivery finished (epoch seconds, the delivering host's clock).
    secrets: str = ""
    secrets_at: int = 0
    # The manifest's backend entry that made the VM ("": written by a sand that did not
    # record it; the backend that sees it in its own pool adopts it and writes its name).
    backend: str = ""
    # Set once when the VM is made and kept across every write: tells this VM from a
    # later one that got the same vmid or name, so a replayed journal step never acts
    # on a successor ("": unknown, not read or written by an older sand).
    incarnation: str = ""

    def to_json_dict(self) -> dict[str, str | int]:
        data: dict[str, str | int] = {
            "project": self.project,
            "name": self.name,
            "identity": self.identity,
            "fingerprint": self.fingerprint,
            "guest_fingerprint": self.guest_fingerprint,
            "image": self.image,
        }
        if self.secrets:
            data.update(secrets=self.secrets, secrets_at=self.secrets_at)
        return data


@dataclass(frozen=True)
class SecretsRecord:
    """What a run delivered to a guest, for its marker: a stamp, never a value."""

    stamp: str  # "" when the VM has no secrets (any recorded stamp is removed)
    delivered_at: int  # epoch seconds


@dataclass(frozen=True)
class ObservedVM:
    """One VM as a backend sees it. ``None`` for a field means "not read"."""

    backend: str
    name: str
    identity: str
    ownership: Ownership
    power: str  # "running" | "stopped" | "unknown"
    cpus: int | None = None
    memory: int | None = None
    disk: int | None = None
    protect: bool = False
    # Protection is on and sand did not set it (an operator did): never proposed for lifting.
    operator_protected: bool = False
    lock: str | None = None  # PVE lock (clone, migrate, ...) or Lima in-flight state
    node: str | None = None
    ports: tuple[tuple[int, int], ...] | None = None  # (guest, host) forwards, Lima only
    marker: Marker | None = None
    deep: bool = False  # true when a per-VM read filled the marker details
    template: bool = False
    # Security-relevant config found on the VM that the manifest does not allow
    # (a writable mount, a non-loopback forward): planned as drift.
    findings: tuple[str, ...] = ()
    details: Mapping[str, str] = field(default_factory=dict)
    # When the guest last (re)started, epoch seconds, as far as the listing tells
    # (PVE: now - uptime; Lima: the host agent's start); None when it cannot.
    booted_at: float | None = None

    @property
    def fingerprint(self) -> str:
        return self.marker.fingerprint if self.marker else ""


@dataclass(frozen=True)
class Observation:
    """Everything one backend showed in one reconcile."""

    backend: str
    vms: tuple[ObservedVM, ...]
    # When set, the listing could not be trusted (limactl failed, an instance
    # without lima.yaml, API down): nothing on this backend is created, pruned
    # or replaced in this run, and the plan says why.
    unknown_reason: str | None = None
    # The VMs whose state made the listing untrusted (empty: the listing as a whole): a
    # journal replay that removes all of them makes it trusted again.
    unknown_because: tuple[str, ...] = ()
    requests: int = 0  # listing/API calls made to observe, for budgets and benchmarks
    warnings: tuple[str, ...] = ()
    # False when a reboot inside a guest does not show in ``booted_at`` (Lima: the
    # host agent lives on): a VM's tmpfs secrets are then checked on the guest.
    reboots_visible: bool = True

    def managed(self) -> list[ObservedVM]:
        return [vm for vm in self.vms if vm.ownership is Ownership.MANAGED]


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
class RecordedVM:
    """A VM this host recorded making (the per-project inventory), to check a listing by."""

    backend: str
    name: str
    identity: str
    incarnation: str = ""
    node: str = ""


@dataclass(frozen=True)
class GuestEndpoint:
    """How provisioning reaches a guest over SSH."""

    host: str
    port: int
    user: str
    identity: str  # private key path; IdentitiesOnly: the only key offered
    # Host-key policy: "pin" (trust on first use, then refuse a change: Lima guests),
    # or "none" (Proxmox cattle IPs; see the security model).
    host_key_policy: str = "pin"
    host_key_alias: str = ""  # the name keys are pinned under (stable across IP reuse)
    jump: JumpHost | None = None


@dataclass(frozen=True)
class JumpHost:
    """The remote Lima host a guest is reached through (keys pinned; agent allowed)."""

    host: str
    port: int
    user: str | None
    identity: str | None
    known_hosts: str | None


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
    # Which desired fields change in place, need a restart, or force replacement.
    field_policy: Mapping[str, Mutability]
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

    async def decide_recovery(self, entry: Mapping[str, object], *, wait: bool) -> RecoveryDecision:
        """What replaying ``entry`` (left by a crashed run) would do; changes nothing.

        With ``wait`` (apply), tasks and processes the killed run left running are awaited
        (bounded) first; without it (plan), such an entry is decided as WAIT."""
        ...

    async def act_recovery(self, entry: Mapping[str, object], decision: RecoveryDecision) -> str:
        """Carry out ``decision`` (identity re-checked first); say what was done. Only the
        journal replay settles the entry."""
        ...

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        """For recorded VMs the listing did not show, checked by id: identity → None when
        confirmed gone, else why it is believed to still exist."""
        ...

    async def close(self) -> None: ...
