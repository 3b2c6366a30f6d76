"""Forks in the desired state: what a ``from: {vm: ...}`` entry resolves to.

A fork takes the fields it leaves out from its source's entry (as the manifest's
checks do, ``sand/manifest/forks.py``), so it carries the source's repos, secrets and
agents and is provisioned like any VM. What it is made from is the source at the apply
that creates it, not an image: its ``image`` reads ``fork:<source>`` and never
follows the source's, so a later change of the source never replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sand.manifest.models import VM

# What a fork never takes from its source (model field names): see manifest/forks.py.
NOT_INHERITED = frozenset({"name", "fork", "protect", "pool"})
# How a fork shows what it is made from (in the plan and its marker).
FORK_PREFIX = "fork:"


@dataclass(frozen=True)
class DesiredFork:
    """The VM a fork is made from, and whether its memory is kept too."""

    source: str
    memory: bool = False
    # Made even while the source's agent is working (where the backend stops the
    # source for the copy: Lima); without it such a fork is refused at apply time.
    force: bool = False
    # Set by the planner where the backend stops the source for the copy (Lima).
    stops_source: bool = False
    # The agents whose login the fork keeps from its source's disk (``from.logins``);
    # every other agent's login file is removed from its copy.
    logins: tuple[str, ...] = ()


def with_inherited(vm: VM, vms: list[VM]) -> VM:
    """``vm`` with every field it leaves out taken from its source (a chain of forks is
    followed; the manifest's checks refused a broken or cyclic one)."""
    if vm.fork is None:  # most VMs: no index of the others (per VM, it was quadratic)
        return vm
    by_name = {v.name: v for v in vms}
    seen = {vm.name}
    source: str | None = vm.fork.vm
    merged = vm
    while source is not None and source not in seen and source in by_name:
        seen.add(source)
        entry = by_name[source]
        missing = {
            key: getattr(entry, key)
            for key in entry.model_fields_set - merged.model_fields_set - NOT_INHERITED
            if key in VM.model_fields
        }
        merged = merged.model_copy(update=missing)
        merged.model_fields_set.update(missing)
        source = entry.fork.vm if entry.fork is not None else None
    return merged


def desired_fork(vm: VM) -> DesiredFork | None:
    if vm.fork is None:
        return None
    return DesiredFork(
        source=vm.fork.vm,
        memory=vm.fork.snapshot == "memory",
        force=vm.fork.force,
        logins=tuple(sorted(set(vm.fork.logins))),
    )
