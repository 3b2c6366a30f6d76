"""The entries ``sand fork`` prints, made and checked against the manifest they join."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sand.errors import SandError
from sand.manifest import load_manifest
from sand.manifest.loader import LoadedManifest, load_manifest_bytes
from sand.manifest.references import check_references


def fork_entries(
    manifest: str, vm: str, count: int, prefix: str | None, *, memory: bool = False
) -> list[dict[str, Any]]:
    """``count`` entries forking ``vm``, named ``prefix``1, 2, ... past the names in use
    (``count`` is bounded where it is parsed: ``sand.cli.arguments.fork.MAX_FORKS``)."""
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


def overlay(manifest: str, entries: list[dict[str, Any]]) -> LoadedManifest:
    """The manifest as it would be with ``entries`` added at the end of its ``vms:``, in
    memory only (``sand fork --apply``): the file is not written. Every line before the
    insertion keeps its number, so what is located in the manifest is located right."""
    with open(manifest, encoding="utf-8") as file:
        text = file.read()
    head = _VMS.search(text)
    if head is None:
        raise SandError(
            f"{manifest}: --apply needs `vms:` written as a block list (`- name: ...` items)"
        )
    after = _TOP_KEY.search(text, head.end())
    at = after.start() if after is not None else len(text)
    before = text[:at] if text[:at].endswith("\n") or not text[:at] else text[:at] + "\n"
    joined = before + render_entries(entries, manifest) + text[at:]
    loaded = load_manifest_bytes(joined.encode(), Path(manifest))
    names = {vm.name for vm in loaded.manifest.vms}
    if any(entry["name"] not in names for entry in entries):  # not where they were put
        raise SandError(f"{manifest}: could not add the forks at the end of its `vms:`")
    return loaded


# The top-level `vms:` key with a block list under it, and the next top-level key.
_VMS = re.compile(r"^vms:[ \t]*(#.*)?$", re.MULTILINE)
_TOP_KEY = re.compile(r"^[A-Za-z_\"']", re.MULTILINE)
