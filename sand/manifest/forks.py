"""The rules of forks (``from: {vm: agent-1}``) that need the whole manifest.

A fork is made from another VM of the same manifest and backend, at the apply that
creates it; it takes every field it leaves out from its source's entry (not
``protect``: an attempt is a throwaway unless said otherwise). A fork of a fork is
allowed, a fork of itself (or a cycle) is not. Whether a backend can keep the source's
memory is the backend's rule. Each finding points at the field to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sand.manifest.rawdata import Finding, as_dict, as_list, as_str
from sand.manifest.yamlmarks import Path

# What a fork never takes from its source: its own name and origin, and protect.
NOT_INHERITED = frozenset({"name", "from", "protect", "pool"})


def fork_source(vm: Mapping[str, Any]) -> str | None:
    """The name of the VM a raw entry is forked from, or None."""
    return as_str(as_dict(vm.get("from")).get("vm"))


def inherited(vm: dict[str, Any], vms: list[Any]) -> dict[str, Any]:
    """A raw entry with the fields it leaves out taken from its source (following a
    chain of forks; a broken or cyclic chain leaves the entry as it is)."""
    source = fork_source(vm)
    if source is None:  # most VMs: no index of the others (per VM, it was quadratic)
        return vm
    by_name = {as_str(as_dict(v).get("name")): as_dict(v) for v in vms}
    merged = dict(vm)
    seen = {as_str(vm.get("name"))}
    while source is not None and source not in seen and source in by_name:
        seen.add(source)
        entry = by_name[source]
        for key, value in entry.items():
            if key not in NOT_INHERITED:
                merged.setdefault(key, value)
        source = fork_source(entry)
    return merged


def check_forks(vms: list[Any], backend_of: Mapping[str, str | None]) -> Iterator[Finding]:
    """The source of each fork is declared, is not the fork itself (nor forked from it),
    and lives on the fork's backend. ``backend_of``: each VM's resolved backend name."""
    by_name = {as_str(as_dict(v).get("name")): as_dict(v) for v in vms}
    for i, vm in enumerate(as_list(vms)):
        vm = as_dict(vm)
        source = fork_source(vm)
        if source is None:
            continue
        at: Path = ("vms", i, "from", "vm")
        name = as_str(vm.get("name"))
        if source not in by_name:
            known = ", ".join(sorted(n for n in by_name if n and n != name)) or "none"
            yield (
                at,
                f"VM {name!r} forks {source!r}, which is not a VM of this manifest "
                + (f"(declared: {known})"),
            )
            continue
        if _cycles(name, by_name):
            yield at, f"VM {name!r} is (through its sources) a fork of itself"
            continue
        mine, theirs = backend_of.get(name or ""), backend_of.get(source)
        if mine is not None and theirs is not None and mine != theirs:
            yield (
                ("vms", i, "backend"),
                f"VM {name!r} forks {source!r} of backend {theirs!r}: a fork lives on its "
                "source's backend (a disk is not copied between backends)",
            )


def _cycles(name: str | None, by_name: Mapping[str | None, dict[str, Any]]) -> bool:
    seen: set[str | None] = set()
    current = name
    while current is not None and current not in seen:
        seen.add(current)
        current = fork_source(by_name.get(current, {}))
        if current == name:
            return True
    return False
