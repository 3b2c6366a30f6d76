"""Warm pools in the desired state: each pool's spares, and what a pooled VM takes.

A spare is a desired VM like any other (``<pool>-spare-<n>``, n = 1..warm), so the
planner creates a missing one, replaces one whose image changed and deletes one the
pool no longer wants as it does any VM. What sets it apart: it belongs to a pool
(``pool``, ``spare``), is provisioned with nothing that is per VM (no repos, no
secrets), always runs, never expires, sleeps or is protected, keeps nothing across a
replacement, and follows a changed golden image (rebuild: onBaseChange).
A pooled VM (``pool: agents``) takes the pool's backend, image and sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sand.manifest.models import VM, Manifest
from sand.manifest.pools import FROM_POOL, Pool, spare_name

T = TypeVar("T")  # the desired VM (sand.desired.spec imports this module)


def pooled(vm: VM, pools: Mapping[str, Pool]) -> VM:
    """``vm`` with what it takes from its pool (itself when it names none)."""
    pool = pools.get(vm.pool or "")
    if pool is None:
        return vm
    update = {
        key: getattr(pool, key)
        for key in FROM_POOL
        if getattr(pool, key) is not None and key not in vm.model_fields_set
    }
    merged = vm.model_copy(update=update)
    merged.model_fields_set.update(update)
    return merged


def spares(
    manifest: Manifest, resolve: Callable[[VM], T], as_spare: Callable[[T, str], T]
) -> list[T]:
    """Every pool's spares: resolved as VMs of the pool (``resolve``), then made
    spares of it (``as_spare``, ``sand.desired.spec``)."""
    out: list[T] = []
    for name, pool in manifest.pools.items():
        for slot in range(1, pool.warm + 1):
            entry: dict[str, Any] = {"name": spare_name(name, slot)}
            entry.update({k: getattr(pool, k) for k in FROM_POOL if getattr(pool, k) is not None})
            # Built from values the manifest's model already validated and parsed.
            out.append(as_spare(resolve(VM.model_construct(**entry)), name))
    return out
