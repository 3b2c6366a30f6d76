"""A plan is plain data: what will happen to each VM, and why.

Nothing here performs I/O. The renderer (``render.py``) and the apply engine
only read these records, and ``--json`` is the same records serialised, so
what a person approves is exactly what runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.desired import DesiredVM
from sand.desired.spec import DesiredBase
from sand.observed import ObservedBase, ObservedVM
from sand.plan.idle import Asleep, Sleep

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import AgentReport


class Action(StrEnum):
    """What happens to the *machine*; what happens inside it is a ``GuestAction``."""

    CREATE = "create"
    UPDATE = "update"  # in place, possibly with a restart
    REPLACE = "replace"  # a new machine takes the old one's place
    DELETE = "delete"
    NOOP = "no-op"  # the machine stays as it is (its guest may still be reprovisioned)
    BLOCKED = "blocked"  # a change is needed but unsafe now (unknown backend, lock, protect)


class GuestAction(StrEnum):
    """What happens to the machine's *contents* (user, agents, repos, secrets)."""

    NONE = "none"
    SECRETS = "secrets"  # only the secrets' values changed (or a restart emptied the tmpfs)
    PROVISION = "provision"  # run provisioning (which delivers the secrets too)


# Which guest actions each machine action admits. A delete leaves no guest; a new
# machine is provisioned whole or not at all. A BLOCKED change keeps the guest action
# it would have taken (shown, never run).
_ADMITS = {
    Action.CREATE: {GuestAction.NONE, GuestAction.PROVISION},
    Action.REPLACE: {GuestAction.NONE, GuestAction.PROVISION},
    Action.DELETE: {GuestAction.NONE},
}


def verb(action: Action, guest: GuestAction) -> str:
    """The word plan output uses for a change: the machine's action, except that a
    machine kept as it is while its guest changes reads "reprovision" (the word
    ``sand plan --json`` has always used)."""
    if action is Action.NOOP and guest is not GuestAction.NONE:
        return "reprovision"
    return action.value


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: object
    after: object
    forces_replacement: bool = False
    requires_restart: bool = False
    # ``after`` is already written, waiting for the VM's next start (PVE's pending config).
    pending_reboot: bool = False


class Strategy(StrEnum):
    """How a replacement is carried out; the plan says which one each will use."""

    # The new machine is made under a temporary name, booted and provisioned
    # (preserved paths restored, verified); only then is the old one deleted and the
    # new one renamed. A failure before that leaves the old VM untouched.
    CREATE_BEFORE_DESTROY = "create-before-destroy"
    # The backend cannot hold both (capacity): preserved paths are archived on the
    # host, the old VM is deleted, the new one is made and the archive restored.
    DESTROY_BEFORE_CREATE = "destroy-before-create"


# A fork's source missing, or not this project's VM (the planner's finding, located at
# the fork's ``from:`` once the plan meets the manifest's file).
FORK_BLOCKER = "fork"
# Why a VM whose fields all match is updated: its marker holds an older fingerprint.
RECORD = "record the converged spec"


@dataclass(frozen=True)
class Blocker:
    """Why a change may not run now, and where in the manifest to fix it."""

    reason: str
    where: str = ""  # "FILE:LINE:COL" of the field at fault, when there is one
    # "preflight" (the backend refused it) | "data" (unpushed work) | FORK_BLOCKER
    kind: str = "preflight"
    details: tuple[str, ...] = ()  # e.g. one line per checkout holding work

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}" if self.where else self.reason


@dataclass(frozen=True)
class VMChange:
    vm: str
    backend: str
    action: Action
    identity: str | None = None
    fields: tuple[FieldChange, ...] = ()
    reasons: tuple[str, ...] = ()
    drift: tuple[FieldChange, ...] = ()
    guest: GuestAction = GuestAction.NONE
    # BLOCKED changes: what would have run, and everything that stops it.
    blocked_action: Action | None = None
    blockers: tuple[Blocker, ...] = ()
    strategy: Strategy | None = None  # REPLACE only
    # Set when the VM's unpushed work is covered by its preserve: paths (sweep done).
    work_preserved: tuple[str, ...] = ()
    # When the VM's expires: passed (epoch seconds): the change deletes it, or keeps it
    # absent. None: the VM has not expired.
    expired_at: float | None = None
    # CREATE/REPLACE: the fingerprint of the golden base the new VM is cloned from (one
    # there already, or one this plan builds); None: made from its image directly.
    base: str | None = None
    # Why a VM made from a golden image no longer matches it (the image changed since);
    # None: it does, or it is not made from one. Shown; acted on only with
    # ``rebuild: onBaseChange`` (then the change is a REPLACE).
    out_of_date: str | None = None
    # The VM goes to sleep, its idle policy met (an UPDATE whose one field is "power").
    sleep: Sleep | None = None
    # The VM is asleep (idle, or ``sand sleep``): in sync as it is ("Synced (asleep)");
    # a change that acts on it wakes it first.
    asleep: Asleep | None = None
    # CREATE of a VM naming ``pool:``: the spare it claims (renamed and provisioned as
    # this VM: no clone, no boot); None: made as any VM (sand.plan.pools).
    claims: str | None = None
    # CREATE of a spare taking the place of one claimed in this plan: (its slot, warm).
    refill: tuple[int, int] | None = None
    desired: DesiredVM | None = field(default=None, compare=False, repr=False)
    observed: ObservedVM | None = field(default=None, compare=False, repr=False)
    claim: ObservedVM | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        admitted = _ADMITS.get(self.blocked_action or self.action)
        if admitted is not None and self.guest not in admitted:
            raise ValueError(f"{self.vm}: a {self.action} change cannot {self.guest} its guest")

    @property
    def requires_restart(self) -> bool:
        return any(f.requires_restart for f in self.fields)

    @property
    def acts(self) -> bool:
        """Whether apply does anything for this change (BLOCKED ones never run)."""
        if self.action is Action.BLOCKED:
            return False
        return self.action is not Action.NOOP or self.guest is not GuestAction.NONE

    @property
    def stops_source(self) -> bool:
        """Whether this makes a fork that stops its source for the copy (Lima), not forced
        (``force: true``): its source's agents are looked at first."""
        fork = self.desired.fork if self.desired is not None else None
        return (
            self.action is Action.CREATE
            and self.claim is None
            and fork is not None
            and fork.stops_source
            and not fork.force
        )

    @property
    def verb(self) -> str:
        """The change's word in plan output: create, update, reprovision, ... ."""
        return verb(self.action, self.guest)

    @property
    def would(self) -> str | None:
        """What a BLOCKED change would have done, in the same words (else None)."""
        if self.blocked_action is None:
            return None
        return verb(self.blocked_action, self.guest)


class BaseAction(StrEnum):
    BUILD = "build"  # provision a base once and freeze it: new VMs are cloned from it
    DELETE = "delete"  # a base no VM was made from and none needs: superseded, or half-made


@dataclass(frozen=True)
class BaseChange:
    """What happens to one golden base of one backend."""

    backend: str
    name: str  # the image's name, or ``auto-<hash>`` for a derived base
    action: BaseAction
    fingerprint: str
    identity: str | None = None  # DELETE: the base deleted
    reasons: tuple[str, ...] = ()
    # BUILD: the VMs this plan creates from it (others may follow in later runs).
    for_vms: tuple[str, ...] = ()
    desired: DesiredBase | None = field(default=None, compare=False, repr=False)
    observed: ObservedBase | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Plan:
    project: str
    changes: tuple[VMChange, ...]
    unknown_backends: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    observed_fingerprint: str = ""
    refresh_only: bool = False
    # What replaying the journal does first (entries a crashed run left), oldest first;
    # ``changes`` are planned as if it had been done. Empty after apply's own replay.
    recovery: tuple[RecoveryDecision, ...] = ()
    # ``--target``: the only VMs planned (every other change kept as a no-op); empty: all.
    targets: tuple[str, ...] = ()
    # ``--replace``: VMs replaced although nothing forces it.
    replacements: tuple[str, ...] = ()
    # Golden bases built (before the VMs made from them) or deleted (after every VM).
    bases: tuple[BaseChange, ...] = ()
    # What the agents of each guest this plan asked (the idle policy's read: running VMs
    # with ``idle:`` and nothing else to do) reported in that one exchange, by VM name:
    # a run reads them from here rather than asking the guest again.
    agents: Mapping[str, AgentReport] = field(default_factory=dict, compare=False, repr=False)

    def actionable(self) -> list[VMChange]:
        return [c for c in self.changes if c.acts]

    @property
    def has_changes(self) -> bool:
        return bool(self.actionable() or self.bases) or any(d.acts for d in self.recovery)

    def out_of_date(self) -> list[VMChange]:
        """VMs made from a golden image that changed since, kept as they are."""
        return [c for c in self.changes if c.out_of_date and c.action is not Action.REPLACE]

    def change_for(self, backend: str, vm: str) -> VMChange | None:
        return next((c for c in self.changes if c.backend == backend and c.vm == vm), None)

    def finishes(self, change: VMChange) -> bool:
        """Whether ``change``'s VM was made by a create a killed run left open, and the
        journal's replay keeps it (adopts it, or waits for what the killed run left and
        then settles it): this apply finishes that VM, it does not add one."""
        return change.observed is not None and any(
            d.op == "create"
            and not d.absent
            and d.action in (RecoveryAction.ADOPT, RecoveryAction.WAIT)
            and (d.backend, d.vm, d.identity) == (change.backend, change.vm, change.identity)
            for d in self.recovery
        )

    def finish_count(self) -> int:
        """How many VMs this apply finishes from the journal (:meth:`finishes`)."""
        return sum(1 for c in self.changes if self.finishes(c))

    def counts(self) -> tuple[int, int, int]:
        """(to add, to change, to destroy), counted as Terraform does (replace = 1 + 1);
        a VM the apply finishes from the journal is counted by :meth:`finish_count`."""
        add = change = destroy = 0
        for c in self.changes:
            if self.recovery and self.finishes(c):
                continue
            if c.action is Action.CREATE:
                add += 1
            elif c.action is Action.REPLACE:
                add += 1
                destroy += 1
            elif c.action is Action.UPDATE or (c.acts and c.action is Action.NOOP):
                change += 1
            elif c.action is Action.DELETE:
                destroy += 1
        return add, change, destroy

    def drifted(self) -> list[VMChange]:
        return [c for c in self.changes if c.drift]

    def deletes_by_backend(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            if c.action is Action.DELETE:
                out[c.backend] = out.get(c.backend, 0) + 1
        return out
