"""Warm pools (``pools:``): spares kept booted and provisioned, claimed by new VMs.

A pool keeps ``warm`` spares of one image on one backend, provisioned up to everything
that is per VM (no name of their own, no secrets, no repos). A VM that names
``pool: agents`` claims a spare instead of being cloned and booted: it takes the pool's
backend, image and sizes (setting its own is refused where it is written), and its
own provisioning (identity, secrets, repos) runs on the spare. Spares are named
``<pool>-spare-<n>``, a name no VM of the manifest may take. Proxmox renames a spare
in one config write; Lima renames only a stopped instance, so a claim there restarts it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import Field

from sand.manifest.fields import (
    DISK_DESCRIPTION,
    MEMORY_DESCRIPTION,
    DiskSize,
    Image,
    MemorySize,
    Strict,
)
from sand.manifest.rawdata import Finding, as_dict, as_list, as_str
from sand.manifest.yamlmarks import Path

# A pool's name is part of its spares' names and of a PVE tag: lower-case, short.
PoolName = Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$")]
SPARE_INFIX = "-spare-"
MAX_WARM = 64
# What a pooled VM takes from its pool and may not set itself.
FROM_POOL = ("backend", "image", "cpus", "memory", "disk")
NOT_WITH_POOL = ("image", "cpus", "memory", "disk", "node", "cpu", "user", "from")

POOLS_DESCRIPTION = (
    "Warm pools, by a name of your choosing: each keeps `warm` spares of one image "
    "booted and provisioned (all but what is per VM: name, identity, secrets, repos); "
    "a VM naming `pool:` claims one (renamed, given its identity, secrets and repos: "
    "no clone, no boot; on Lima one restart) and the pool is refilled. "
    "docs/fork-and-pools.md."
)
POOL_DESCRIPTION = (
    "Claim a spare of this pool (under `pools`) instead of cloning and booting a new VM; "
    "the VM takes the pool's backend, image and sizes. With no spare ready it is created "
    "as any VM."
)


class Pool(Strict):
    """One warm pool: ``warm`` spares of ``image`` on ``backend``."""

    warm: int = Field(
        ge=0, le=MAX_WARM, description="How many spares to keep ready (0-64).", examples=[3]
    )
    image: Image | None = Field(
        default=None,
        description="What the spares are made from, as a VM's `image` (default: "
        "defaults.image); a change replaces the spares, never a VM that claimed one.",
        examples=["workbench"],
    )
    backend: str | None = Field(
        default=None,
        description="A name under `backends` (default: defaults.backend); a VM of this "
        "pool lives there.",
        examples=["pve"],
    )
    cpus: int | None = Field(
        default=None,
        ge=1,
        le=512,
        description="Virtual CPUs of each spare, 1 to 512 (default: defaults.cpus, else 2).",
        examples=[4],
    )
    memory: MemorySize | None = Field(
        default=None, description=MEMORY_DESCRIPTION, examples=["8GiB"]
    )
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION, examples=["40GiB"])


def spare_name(pool: str, slot: int) -> str:
    """The name of spare ``slot`` (1-based) of ``pool``."""
    return f"{pool}{SPARE_INFIX}{slot}"


def with_pool(vm: dict[str, Any], pools: Mapping[str, Any]) -> dict[str, Any]:
    """A raw entry with what it takes from its pool (nothing when it names none)."""
    pool = as_dict(pools.get(as_str(vm.get("pool")) or ""))
    if not pool:
        return vm
    merged = dict(vm)
    for key in FROM_POOL:
        if pool.get(key) is not None:
            merged.setdefault(key, pool[key])
    return merged


def check_pools(data: Mapping[str, Any]) -> Iterator[Finding]:
    """Each pool's backend can keep one; each pooled VM names a pool and leaves to it
    what it takes from it; no VM takes a spare's name."""
    pools = as_dict(data.get("pools"))
    backends = as_dict(data.get("backends"))
    default = as_str(as_dict(data.get("defaults")).get("backend"))
    if default is None and backends:
        default = next(iter(backends))
    pool_backend: dict[str, str | None] = {}
    for name, raw in pools.items():
        pool = as_dict(raw)
        backend = as_str(pool.get("backend")) or default
        pool_backend[name] = backend
        at: Path = ("pools", name, "backend") if pool.get("backend") else ("pools", name)
        if backend is not None and backend not in backends:
            choices = ", ".join(sorted(backends)) or "none defined"
            yield at, f"unknown backend {backend!r} (defined: {choices})"
    for i, raw_vm in enumerate(as_list(data.get("vms"))):
        vm = as_dict(raw_vm)
        name = as_str(vm.get("name")) or ""
        if _spare_like(name, pools):
            yield (
                ("vms", i, "name"),
                f"VM name {name!r} is a spare's name (<pool>{SPARE_INFIX}<n>): choose another",
            )
        pool_name = as_str(vm.get("pool"))
        if pool_name is None:
            continue
        if pool_name not in pools:
            known = ", ".join(sorted(pools)) or "none defined"
            yield ("vms", i, "pool"), f"unknown pool {pool_name!r} (defined: {known})"
            continue
        for key in NOT_WITH_POOL:
            if vm.get(key) is not None:
                yield (
                    ("vms", i, key),
                    f"VM {name!r} claims a spare of pool {pool_name!r}: its {key} is the pool's "
                    "(set it on the pool, or leave out `pool`)",
                )
        mine = as_str(vm.get("backend"))
        if mine is not None and mine != pool_backend.get(pool_name):
            yield (
                ("vms", i, "backend"),
                f"VM {name!r} claims a spare of pool {pool_name!r}, which lives on backend "
                f"{pool_backend.get(pool_name)!r}: a spare is claimed where it is",
            )


def _spare_like(name: str, pools: Mapping[str, Any]) -> bool:
    pool, infix, slot = name.rpartition(SPARE_INFIX)
    return bool(infix) and pool in pools and slot.isdigit()
