"""The entries ``sand fork`` prints, made and checked against the manifest they join."""

from __future__ import annotations

import re
from typing import Any

import yaml

from sand.errors import SandError
from sand.manifest import load_manifest
from sand.manifest.references import check_references


def fork_entries(
    manifest: str, vm: str, count: int, prefix: str | None, *, memory: bool = False
) -> list[dict[str, Any]]:
    """``count`` entries forking ``vm``, named ``prefix``1, 2, ... past the names in use
    (``count`` is bounded where it is parsed: ``sand.cli.fork.MAX_FORKS``)."""
    loaded = load_manifest(manifest)  # a broken manifest is reported as any command does
    names = {v.name.lower() for v in loaded.manifest.vms}
    if vm not in {v.name for v in loaded.manifest.vms}:
        raise SandError(f"{manifest} declares no VM {vm!r}")
    stem = prefix if prefix is not None else f"{vm}-fork-"
    source: dict[str, Any] = {"vm": vm, "snapshot": "memory"} if memory else {"vm": vm}
    entries: list[dict[str, Any]] = []
    number = 0
    while len(entries) < count:
        number += 1
        name = f"{stem}{number}"
        if name.lower() not in names:
            entries.append({"name": name, "from": dict(source)})
    _check(manifest, entries)
    return entries


def _check(manifest: str, entries: list[dict[str, Any]]) -> None:
    """The manifest's own checks, on the manifest with the entries added; only what they
    find in the entries is theirs to report (the rest was valid before)."""
    with open(manifest, encoding="utf-8") as file:
        data = yaml.safe_load(file)
    known = len(data["vms"])
    data["vms"] = [*data["vms"], *entries]
    problems = [
        message
        for path, message in check_references(data)
        if len(path) > 1 and path[0] == "vms" and isinstance(path[1], int) and path[1] >= known
    ]
    if problems:
        raise SandError("the forks would not be valid:\n" + "\n".join(sorted(set(problems))))


def render_entries(entries: list[dict[str, Any]], manifest: str) -> str:
    """The entries as items of the manifest's ``vms:`` list, indented as its own items
    are (so they can be appended as they are), with a flow ``from``."""
    with open(manifest, encoding="utf-8") as file:
        items = _ITEM.findall(file.read())
    pad = items[-1] if items else "  "
    lines: list[str] = []
    for entry in entries:
        source = ", ".join(f"{k}: {v}" for k, v in entry["from"].items())
        lines += [f"{pad}- name: {entry['name']}", f"{pad}  from: {{{source}}}"]
    return "\n".join(lines) + "\n"


# An item of a list of VMs as written: "  - name: agent-1" (its indent is kept).
_ITEM = re.compile(r"^( *)- name:", re.MULTILINE)
