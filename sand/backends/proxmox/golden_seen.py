"""Golden bases in the listing, told from the VMs that only look like them.

A person's full clone of a base copies its tags and its description, so tags alone
cannot say which VM is the base sand built: the base's description names its own
vmid, a copy's names the VM it was copied from. Bases are found from the listing's
tags (no request); only a base that is not ready — the kind the plan deletes as
half-made — has its description read, once, before the plan promises to delete it.
A look-alike is neither a base nor a VM of this project: it is left alone, and each
plan says so once. (A ready base, a template, is trusted by its tags: a look-alike
of one would take a person's clone, conversion to a template and sand's very name.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx, in_pool
from sand.observed import ObservedBase

BASE_NAME_PREFIX = "sand-golden-"


def golden_name(vm_name: str) -> str:
    """The image a base was built for, from its VM name ``sand-golden-<image>-<fp8>``."""
    middle = vm_name.removeprefix(BASE_NAME_PREFIX)
    image, _, _ = middle.rpartition("-")
    return image or vm_name


def built_here(ctx: Ctx, identity: str, config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is that of a base sand built for this project and backend
    entry at vmid ``identity`` (its golden block names that very vmid)."""
    block = desc.parse_golden_block(config.get("description")) or {}
    return (
        block.get("project") == ctx.project
        and block.get("backend") == ctx.name
        and str(block.get("vmid")) == identity
    )


def lookalike(ctx: Ctx, base: ObservedBase, vm_name: str) -> str:
    return (
        f"VM {base.identity} ({vm_name}) carries the golden-base tags of project "
        f"{ctx.project} but is not a base sand built (a copy of one, made outside sand): "
        "left alone"
    )


def bases_of(ctx: Ctx, rows: Sequence[Mapping[str, Any]]) -> tuple[ObservedBase, ...]:
    """This project's golden bases of this backend entry in ``rows`` (tags only: no read).

    A base is ready only as a template carrying its fingerprint tag. The VMs made from
    it are every row carrying its ``sand-from-`` tag, whoever owns them now."""
    mine = mk.backend_tag(ctx.name)
    made: dict[str, list[str]] = {}
    cloning = [str(r["vmid"]) for r in rows if r.get("lock") == "clone" and in_pool(ctx, r)]
    for row in rows:
        tags = mk.parse_tags(row.get("tags"))
        if tags.base:
            made.setdefault(tags.base, []).append(str(row.get("name") or row["vmid"]))
    found: list[ObservedBase] = []
    for row in rows:
        tags = mk.parse_tags(row.get("tags"))
        if tags.golden is None or tags.project != ctx.project or tags.backend != mine:
            continue
        if not in_pool(ctx, row):
            continue  # moved out of the pool: not this backend's to use or remove
        fingerprint = "" if tags.golden == mk.NEW else tags.golden
        busy = None
        if row.get("lock"):
            busy = f"locked ({row.get('lock')})"
        elif cloning or ctx.cloning_ids:
            busy = f"a clone is running in pool {ctx.config.pool!r}"
        found.append(
            ObservedBase(
                backend=ctx.name,
                name=golden_name(str(row.get("name") or "")),
                identity=str(row["vmid"]),
                fingerprint=fingerprint,
                ready=bool(row.get("template")) and bool(fingerprint),
                made=tuple(made.get(fingerprint, ())) if fingerprint else (),
                busy=busy,
            )
        )
    return tuple(sorted(found, key=lambda b: int(b.identity)))
