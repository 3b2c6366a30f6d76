"""What a backend type can do with each field, declared by the backend itself.

The planner reads these and never asks which backend type it is planning for: a
field changes in place, needs a restart, grows only, or forces replacement; names
are unique or not; a replacement can be made beside the old VM or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Mutability(StrEnum):
    IN_PLACE = "in-place"
    RESTART = "in-place, requires restart"
    GROW_ONLY = "in-place when growing, replace when shrinking"
    REPLACE = "forces replacement"


def fields_with(policy: Mapping[str, Mutability], *kinds: Mutability) -> tuple[str, ...]:
    """The fields ``policy`` gives one of ``kinds``, in its order: what a backend's own
    update path reads off its declared policy instead of listing them again."""
    return tuple(name for name, kind in policy.items() if kind in kinds)


# Fields the planner compares, and whether the guest itself must be reprovisioned.
INFRA_FIELDS = (
    "image",
    "cpus",
    "cpu",
    "memory",
    "disk",
    "state",
    "protect",
    "node",
    "ports",
    "egress",
)
# Why a backend that declares nothing else cannot enforce ``egress:``.
NO_EGRESS = "this backend has no place outside the guest to enforce an egress policy at"


@dataclass(frozen=True)
class Capabilities:
    """What planning needs to know of a backend type."""

    # Which desired fields change in place, need a restart, or force replacement.
    field_policy: Mapping[str, Mutability] = field(default_factory=dict)
    # Instance names are unique on the backend (Lima: a directory each), so a VM that is
    # not sand's holding a desired name blocks the create instead of standing beside it.
    unique_names: bool = False
    # The backend can hibernate a VM (memory kept, exact resume: Proxmox's suspend to
    # disk); one that cannot puts an idle VM to sleep by stopping it (Lima).
    suspends: bool = False
    # Can make a VM from another one's disk (a fork, ``from: {vm: ...}``); a fork on a
    # backend that cannot is blocked, never created from an image instead.
    fork: bool = False
    # A fork stops its source for the copy and starts it again (Lima: limactl clone
    # copies a stopped instance); it is then refused while the source's agent works.
    fork_stops_source: bool = False
    # What the backend object can do at all: it puts VMs to sleep and wakes them
    # (``Sleeps``), it claims a warm pool's spares (``ClaimsSpares``). Never declared
    # by hand: :func:`sand.backends.abilities.capabilities_of` reads them off the abilities the
    # backend implements, so the plan never promises what the engine would refuse.
    sleeps: bool = False
    claims: bool = False
    # Why the backend cannot enforce an ``egress:`` policy outside the guest, shown on
    # each VM with a deny policy that the plan refuses (``!``): a VM is never made open
    # and closed later, nor left open while the plan says it is closed. A backend that
    # enforces one declares the field ``egress`` in its ``field_policy`` instead (written
    # with the VM at create, changed in place, listed as ``ObservedVM.egress``).
    egress_gap: str = NO_EGRESS
    # Why a backend that enforces egress cannot filter by name (a deny policy with
    # ``domains`` is then refused, ``!``); empty: it can.
    egress_names_gap: str = ""

    @property
    def enforces_egress(self) -> bool:
        return "egress" in self.field_policy
