"""Which fields need a restart, or are updated at all, is declared once per backend (its
``FIELD_POLICY``, which planning reads as ``capabilities``); the update paths follow it."""

from __future__ import annotations

from sand.backends.capabilities import Mutability
from sand.backends.lima import LimaBackend
from sand.backends.lima import lifecycle as lima
from sand.backends.proxmox import lifecycle as proxmox
from sand.backends.proxmox.backend import ProxmoxBackend


def kinds(policy: object, *wanted: Mutability) -> set[str]:
    assert isinstance(policy, dict)
    return {name for name, kind in policy.items() if kind in wanted}


def test_planning_reads_the_policy_the_update_paths_follow() -> None:
    assert ProxmoxBackend.capabilities.field_policy is proxmox.FIELD_POLICY
    assert LimaBackend.capabilities.field_policy is lima.FIELD_POLICY


def test_proxmox_updates_every_field_it_does_not_replace_and_restarts_for_its_restart_fields() -> (
    None
):
    policy = proxmox.FIELD_POLICY
    assert set(proxmox.UPDATABLE) == set(policy) - kinds(policy, Mutability.REPLACE)
    assert proxmox.NEEDS_RESTART == kinds(policy, Mutability.RESTART) == {"cpus", "cpu", "memory"}


def test_lima_edits_the_stopped_instance_for_its_restart_fields_and_the_disk() -> None:
    policy = lima.FIELD_POLICY
    # egress needs a restart too, but through sand's QEMU shim, not ``limactl edit``.
    assert kinds(policy, Mutability.RESTART, Mutability.GROW_ONLY) == lima.CONFIG_FIELDS | {
        "egress"
    }
    assert {"cpus", "memory", "disk", "ports"} == lima.CONFIG_FIELDS
