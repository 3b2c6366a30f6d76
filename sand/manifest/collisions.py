"""Checks for two entries of a manifest that are one thing in the world.

Each is valid alone, but together they collide: two backends that would see
each other's VMs as their own (the second apply would delete the first's
VMs), two VM names one DNS name or one directory on a case-insensitive disk
cannot tell apart, two repos checked out into one directory, a path
preserved twice. Like ``references.py`` these read the raw YAML data
defensively; each finding is reported at the second entry, naming the first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sand.manifest.backends import CONFIGS
from sand.manifest.hosts import same_place
from sand.manifest.values import entry_name_problem, home_path_problem, normalise_home_path
from sand.manifest.yamlmarks import Path

# (path, message, point at the key rather than the value)
Finding = tuple[Path, str, bool]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def check_collisions(data: Any, manifest_dir: str) -> Iterator[Finding]:
    data = _dict(data)
    for section, kind in (("backends", "backend"), ("repos", "repo")):
        for name in _dict(data.get(section)):
            problem = entry_name_problem(name, kind)
            if problem:
                yield (section, name), problem, True
    yield from _shared_backends(_dict(data.get("backends")), manifest_dir)
    yield from _case_twins(_list(data.get("vms")))
    repos = _dict(data.get("repos"))
    for i, vm in enumerate(_list(data.get("vms"))):
        vm = _dict(vm)
        yield from _checkout_twins(("vms", i), _list(vm.get("repos")), repos)
        yield from _preserve_twins(("vms", i, "preserve"), _list(vm.get("preserve")))
    yield from _preserve_twins(
        ("defaults", "preserve"), _list(_dict(data.get("defaults")).get("preserve"))
    )


def _shared_backends(backends: dict[str, Any], manifest_dir: str) -> Iterator[Finding]:
    """A backend owns every VM carrying the project's marker where it looks; two that
    look at the same place would each take the other's VMs for stale ones of its own."""
    seen: list[tuple[tuple[object, ...], str]] = []
    for name, backend in backends.items():
        backend = _dict(backend)
        config = CONFIGS.get(str(backend.get("type")))
        where = config.ownership_scope(backend, manifest_dir) if config else None
        if where is None:
            continue
        key, described, fix = where
        other = next((them for place, them in seen if same_place(place, key)), None)
        if other is not None:
            yield (
                ("backends", name),
                f"backend {name!r} would see backend {other!r}'s VMs as its own: both "
                f"use {described}; {fix}",
                True,
            )
        else:
            seen.append((key, name))


def _case_twins(vms: list[Any]) -> Iterator[Finding]:
    first: dict[str, tuple[int, str]] = {}
    for i, vm in enumerate(vms):
        name = _dict(vm).get("name")
        if not isinstance(name, str) or not name:
            continue
        folded = name.casefold()
        if folded in first and first[folded][1] != name:
            j, other = first[folded]
            yield (
                ("vms", i, "name"),
                f"VM name {name!r} differs from vms[{j}]'s {other!r} only in case: they "
                "would share one DNS name and one directory on a case-insensitive disk",
                False,
            )
        first.setdefault(folded, (i, name))


def _checkout_twins(at: Path, names: list[Any], repos: dict[str, Any]) -> Iterator[Finding]:
    by_path: dict[str, str] = {}
    for j, name in enumerate(names):
        if not isinstance(name, str) or name not in repos:
            continue
        path = _dict(repos[name]).get("path")
        if path is None:
            path = f"~/src/{name}"
        if not isinstance(path, str) or home_path_problem(path):
            continue  # reported where the path is written
        path = normalise_home_path(path)
        if path in by_path:
            other = by_path[path]
            message = (
                f"repo {name!r} is listed twice"
                if other == name
                else f"repo {name!r} checks out at {path}, where repo {other!r} already does"
            )
            yield (*at, "repos", j), message, False
        by_path.setdefault(path, name)


def _preserve_twins(at: Path, paths: list[Any]) -> Iterator[Finding]:
    seen: dict[str, int] = {}
    for j, path in enumerate(paths):
        if not isinstance(path, str) or home_path_problem(path):
            continue
        path = normalise_home_path(path)
        if path in seen:
            yield (*at, j), f"{path} is already preserved (item {seen[path]})", False
        seen.setdefault(path, j)
