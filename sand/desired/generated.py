"""Generators in the desired state: one VM of a generator's template per work item.

The work items are an input, read from the world beforehand (``sand.workitems``, at
plan time, like the backends' listings); expanding them is pure. An item's text
(branch name, title, body) is data from whoever can push a branch or open an issue:
it never becomes a VM's name as written (the name is made of ``[a-z0-9-]`` and a
digest), a path, or a key of the manifest; only a branch that passes git's own rules
(``sand.refname``) is checked out, as a value.

A VM's name is stable (the same item always gives the same name, whatever other items
exist), valid on every backend, and collision-free: a branch whose name is not already
a name (``feature/x``, ``Fix_It``, one too long) is named ``<prefix>-<slug>--<digest>``,
and a name written with ``--`` never comes from a branch as it is, so ``feature-x`` and
``feature/x`` cannot meet.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from sand.desired.parts import DesiredRepo
from sand.manifest.generators import Generator
from sand.manifest.models import VM, Manifest
from sand.manifest.names import reserved_name_problem
from sand.refname import branch_problem
from sand.terminal import one_line

T = TypeVar("T")  # the desired VM (sand.desired.spec imports this module)

MAX_NAME = 63  # a DNS label: what Proxmox and Lima both take
_EXACT = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class WorkItem:
    """One work item as its source tells it. ``key`` is its identity (the branch's
    name, ``acme/app#123``); ``number`` an issue's or pull request's; ``branch`` what
    its VM checks out (None: the repository's own branch). The text is untrusted."""

    key: str
    branch: str | None = None
    number: int | None = None
    title: str = ""
    body: str = ""
    url: str = ""


@dataclass(frozen=True)
class GeneratedFrom:
    """Which generator made a VM, from which item (shown in the plan, filtered there);
    ``text``: the item as the JSON its guest is given (``itemFile``), else empty."""

    generator: str
    item: str
    title: str = ""
    text: str = field(default="", repr=False)


# The work items each generator found, by generator name.
WorkItems = Mapping[str, Sequence[WorkItem]]


def item_vm_name(prefix: str, item: WorkItem) -> str:
    """The VM name of ``item``: ``<prefix>-<number>`` for an issue or pull request,
    ``<prefix>-<branch>`` for a branch that is already a name, else
    ``<prefix>-<slug>--<digest>``."""
    if item.number is not None:
        return f"{prefix}-{item.number}"
    whole = f"{prefix}-{item.key}"
    if _EXACT.match(item.key) and len(whole) <= MAX_NAME:
        return whole
    digest = hashlib.sha256(item.key.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    room = MAX_NAME - len(prefix) - len(digest) - 3
    slug = re.sub(r"[^a-z0-9]+", "-", item.key.lower())[:room].strip("-")
    return f"{prefix}-{slug}--{digest}" if slug else f"{prefix}--{digest}"


def generated(
    manifest: Manifest,
    items: WorkItems,
    resolve: Callable[[VM], T],
    finish: Callable[[T, str, GeneratedFrom, str | None], T],
    taken: Iterable[str],
) -> tuple[list[T], list[str]]:
    """Every generator's VMs, and what the plan should say about items left out.

    ``resolve`` makes a manifest entry a desired VM; ``finish`` gives it its item's
    branch on ``repo`` and its provenance (``sand.desired.spec``); ``taken``: the
    names of the VMs the manifest declares (and pools' spares), never given again."""
    names = set(taken)
    out: list[T] = []
    notes: list[str] = []
    for gen_name, gen in manifest.generators.items():
        wanted = _ordered(items.get(gen_name, ()))
        if len(wanted) > gen.max:
            notes.append(
                f"generator {gen_name}: {len(wanted)} work items, held at max {gen.max} "
                f"(the first {gen.max} in order; the rest wait)"
            )
            wanted = wanted[: gen.max]
        prefix = gen.prefix or gen_name
        for item in wanted:
            name = item_vm_name(prefix, item)
            why = _refused(gen, manifest, name, item, names)
            if why:
                notes.append(f"generator {gen_name}: no VM for {_quoted(item.key)}: {why}")
                continue
            names.add(name)
            entry = _entry(gen, name)
            text = _item_json(item) if gen.item_file else ""
            source = GeneratedFrom(gen_name, item.key, item.title, text)
            out.append(finish(resolve(entry), gen.source_repo, source, item.branch))
    return out, notes


def with_item_branch(
    repos: tuple[DesiredRepo, ...], repo: str, branch: str | None
) -> tuple[DesiredRepo, ...]:
    """``repos`` with ``repo`` checked out on the item's ``branch``."""
    if branch is None:
        return repos
    return tuple(replace(r, branch=branch) if r.name == repo else r for r in repos)


def _ordered(items: Sequence[WorkItem]) -> list[WorkItem]:
    """One per key, in a stable order (numbers first, oldest first; then by name), so
    the same items are held at ``max`` whatever order the source listed them in."""
    seen: dict[str, WorkItem] = {}
    for item in items:
        seen.setdefault(item.key, item)
    big = 1 << 62
    return sorted(seen.values(), key=lambda i: (i.number if i.number is not None else big, i.key))


def _refused(gen: Generator, m: Manifest, name: str, item: WorkItem, names: set[str]) -> str:
    if item.branch is not None and branch_problem(item.branch):
        return f"its branch is not one sand checks out ({branch_problem(item.branch)})"
    if name in names:
        return f"the name {name} is taken"
    backend = gen.vm.backend or m.defaults.backend or next(iter(m.backends))
    config = m.backends.get(backend)
    problem = reserved_name_problem(name) or (config.name_problem(name) if config else None)
    return problem or ""


def _entry(gen: Generator, name: str) -> VM:
    """The template as a VM entry named ``name`` that clones the generator's repo."""
    repos = list(gen.vm.repos)
    if gen.source_repo not in repos:
        repos.append(gen.source_repo)
    values = {key: getattr(gen.vm, key) for key in VM.model_fields}
    values.update(name=name, repos=repos)
    # Built from values the manifest's model already validated and parsed; the fields
    # the template set stay the ones set (a pooled VM is told apart by them).
    return VM.model_construct(_fields_set=gen.vm.model_fields_set | {"name", "repos"}, **values)


def _item_json(item: WorkItem) -> str:
    """The item as its guest's agent reads it: JSON, every control character escaped
    (``json.dumps`` leaves none raw), so the file holds no NUL and no escape."""
    fields = {"key": item.key, "number": item.number, "branch": item.branch}
    fields.update(title=item.title, body=item.body, url=item.url)
    return json.dumps(fields, ensure_ascii=True, indent=2) + "\n"


def _quoted(text: str) -> str:
    """An item's key as a note may show it: one inert line, short."""
    return repr(one_line(text, 80))
