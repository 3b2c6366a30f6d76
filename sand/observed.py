"""What backends report about the VMs they see, and the one rule of who owns a VM.

The lowest floor of sand's vocabulary: a backend reads a VM's marker (PVE tags and
description, a Lima sidecar) as *claims* — each says "project P made me as VM I (for
backend entry B)" — and :func:`ownership` turns the claims plus the VM's own identity
into an :class:`Ownership`. Both backends ask this one function, so "managed" means the
same on Lima and Proxmox, and is tested once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property


class Ownership(StrEnum):
    MANAGED = "managed"  # our marker: this project, and the VM's own identity
    UNMANAGED = "unmanaged"  # no marker: a human's VM, never touched
    COPIED = "copied"  # our marker naming another identity: a human's clone of ours
    OTHER_PROJECT = "other-project"  # sand's marker for another project
    # This project's marker naming another backend entry of the manifest (two entries on
    # one cluster or host): that entry's VM, never deleted or adopted by this one.
    OTHER_BACKEND = "other-backend"


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
    # When the VM was made (epoch seconds, the creating host's clock), set once like the
    # incarnation and kept across every write: what an ``expires:`` duration counts
    # from. A replacement is a new VM and starts again. 0: not recorded (an older sand).
    created_at: int = 0
    # The fingerprint of the golden base the VM was cloned from ("": made without one).
    # Set once, like the creation time: what a VM made from an image is out of date by.
    base: str = ""
    # The warm pool this VM is a spare of ("": not a spare). A spare holds no work and
    # is claimed by a new VM naming its pool (renamed; this is cleared then).
    pool: str = ""

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
        if self.created_at:
            data["created_at"] = self.created_at
        if self.base:
            data["base"] = self.base
        if self.pool:
            data["pool"] = self.pool
        return data


@dataclass(frozen=True)
class SecretsRecord:
    """What a run delivered to a guest, for its marker: a stamp, never a value."""

    stamp: str  # "" when the VM has no secrets (any recorded stamp is removed)
    delivered_at: int  # epoch seconds


# The two ways a VM sleeps, one word each everywhere (plan, marks, records, backends):
# hibernated, its RAM saved and resumed exactly (a backend that can: Proxmox), or
# stopped (processes and tmux sessions end; files stay).
SUSPENDED = "suspended"
STOPPED = "stopped"
SLEEP_WAYS = (SUSPENDED, STOPPED)


@dataclass(frozen=True)
class SleepMark:
    """What a VM says of its own sleep, written on it as sand put it to sleep (a PVE
    tag, a Lima sidecar): how, since when (epoch seconds), by whose decision ("idle",
    "person"). Every host that lists the VM reads it."""

    how: str  # one of SLEEP_WAYS
    since: int
    by: str


@dataclass(frozen=True)
class ObservedVM:
    """One VM as a backend sees it. ``None`` for a field means "not read"."""

    backend: str
    name: str
    identity: str
    ownership: Ownership
    power: str  # "running" | "stopped" | "unknown"
    cpus: int | None = None
    cpu: str | None = None  # CPU type (PVE's cputype); None: not read, or none on this backend
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
    # Values the backend holds pending until the VM's next start (PVE: a running VM's
    # config change waiting for a reboot), by sand field: cpu, cpus, memory.
    pending: Mapping[str, object] = field(default_factory=dict)
    # Where a person reaches the guest, as far as the listing tells (Lima: its SSH
    # forward, "127.0.0.1:60022", with the remote host named); None when only the
    # guest itself could say (Proxmox: its guest agent, one request per VM).
    address: str | None = None
    # The sleep sand recorded on the VM itself (None: none, or the backend keeps none).
    slept: SleepMark | None = None
    # Hibernated as the backend itself tells it (PVE: the config's lock while its RAM
    # is in a state volume), whoever put it there: the planner reads this, never a
    # backend's own lock word.
    hibernated: bool = False
    # The egress policy the backend enforces for the VM, as the desired state shows it
    # (``DesiredVM.infra()["egress"]``); None: none, or not read (a backend that does not
    # enforce egress never reads one).
    egress: str | None = None

    @property
    def fingerprint(self) -> str:
        return self.marker.fingerprint if self.marker else ""


@dataclass(frozen=True)
class ObservedBase:
    """A golden base as its backend's listing shows it (a PVE template, a Lima instance),
    carrying sand's base marker for this project and backend entry."""

    backend: str
    name: str  # the image it was built for (``images:`` name, or ``auto-<hash>``)
    identity: str  # PVE vmid, Lima instance name
    fingerprint: str  # what it was built from; "" when its marker does not say
    # Built and frozen (a template, a stopped instance with its stamp): the only kind a
    # VM is ever cloned from. False: a build a crash or a failure left (never cloned).
    ready: bool
    # The VMs the listing shows as made from it (any owner: a person's copy counts too).
    made: tuple[str, ...] = ()
    # Why it must not be deleted now though nothing needs it (a lock, a clone running).
    busy: str | None = None
    # Why it is deleted though it is not half-made: a kind of base the backend no
    # longer uses (Lima's clone-source bases of earlier versions); "" for any other.
    retired: str = ""


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
    # This project's golden bases on this backend, from the same listing.
    bases: tuple[ObservedBase, ...] = ()
    # Why this backend cannot enforce a deny egress policy now, though its type can (a
    # switch that is off, a token that cannot read it): each such VM is refused (``!``).
    egress_gap: str | None = None

    def managed(self) -> list[ObservedVM]:
        return [vm for vm in self.vms if vm.ownership is Ownership.MANAGED]

    def named(self, name: str) -> tuple[ObservedVM, ...]:
        """The VMs listed under ``name``, in listing order (any owner)."""
        return self._by_name.get(name, ())

    @cached_property
    def _by_name(self) -> dict[str, tuple[ObservedVM, ...]]:
        # Built once per observation: planning looks up every desired VM by name, and a
        # scan per lookup made a 1000-VM plan quadratic.
        index: dict[str, list[ObservedVM]] = {}
        for vm in self.vms:
            index.setdefault(vm.name, []).append(vm)
        return {name: tuple(vms) for name, vms in index.items()}


@dataclass(frozen=True)
class RecordedVM:
    """A VM this host recorded making (the per-project inventory), to check a listing by."""

    backend: str
    name: str
    identity: str
    incarnation: str = ""
    node: str = ""


@dataclass(frozen=True)
class Claim:
    """One marker's say about a VM: made by ``project`` as VM ``identity`` (its vmid or
    instance name when it was made) for backend entry ``backend`` ("": not recorded, by
    an older sand; the entry that sees it where it lives adopts it)."""

    project: str
    identity: str
    backend: str = ""


def ownership(claims: Sequence[Claim], *, identity: str, project: str, backend: str) -> Ownership:
    """Whose VM this is, for backend entry ``backend`` of ``project``.

    No claim: a person's VM. Any claim of another project: theirs. Any claim naming
    another identity: a copy a person made of one of ours (PVE clones copy the
    description, ``limactl clone`` copies the sidecar), never ours to change. Any claim
    naming another entry of this project: that entry's. Otherwise ours. Every claim must
    agree: a VM whose tags and description disagree is not believed to be ours.
    """
    if not claims:
        return Ownership.UNMANAGED
    if any(c.project != project for c in claims):
        return Ownership.OTHER_PROJECT
    if any(c.identity != identity for c in claims):
        return Ownership.COPIED
    if any(c.backend and c.backend != backend for c in claims):
        return Ownership.OTHER_BACKEND
    return Ownership.MANAGED
