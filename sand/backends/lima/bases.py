"""sand's base instances: ``sand-base-<project>-<hash>``, one per (image, user).

A VM whose base other VMs share is ``limactl clone``-d from it: the base is built once
with ``limactl create``, never started, and rebuilt when its content stamp (a digest of
the config sand generates for it) changes, under a lock so no clone races a rebuild.
A base carries a stamp file, not a marker: it is plumbing, never a VM of the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sand.backends.lima import limayaml, observe, scripts, vmops
from sand.backends.lima.context import BaseState, Ctx
from sand.backends.lima.listing import LimaInstance
from sand.backends.lima.marker import BaseStamp
from sand.desired import DesiredVM, digest
from sand.errors import BackendError
from sand.manifest.backends.lima import RESERVED_PREFIX
from sand.state.journal import Journal

BASE_FORMAT = 1  # bump to rebuild every base when the generated base config changes


def base_name(project: str, vm: DesiredVM) -> str:
    key = digest({"image": vm.image, "user": vm.user}, 8)
    return f"{RESERVED_PREFIX}-{project}-{key}"


def _base_doc(project: str, vm: DesiredVM, name: str) -> dict[str, Any]:
    return limayaml.base_config(image=vm.image, user=vm.user, project=project, name=name)


def base_stamp(project: str, vm: DesiredVM) -> str:
    name = base_name(project, vm)
    security = limayaml.security_settings((), None)
    return digest({"format": BASE_FORMAT, "doc": _base_doc(project, vm, name), "set": security})


def count_users(ctx: Ctx, desired: Sequence[DesiredVM]) -> None:
    """Remember how many desired VMs share each base (two or more: worth building one)."""
    ctx.base_users = {}
    for vm in (v for v in desired if v.fork is None):  # a fork is copied from its source
        key = base_name(ctx.project, vm)
        ctx.base_users[key] = ctx.base_users.get(key, 0) + 1


def should_clone(ctx: Ctx, vm: DesiredVM) -> bool:
    if vm.disk < limayaml.BASE_DISK:
        return False  # a clone can only grow its disk
    name = base_name(ctx.project, vm)
    stamp = ctx.base_stamps.get(name)
    if stamp is not None and stamp.stamp == base_stamp(ctx.project, vm):
        return True  # a fresh base exists: cloning is the fast path
    return ctx.base_users.get(name, 0) >= 2


async def ensure_base(ctx: Ctx, vm: DesiredVM, journal: Journal) -> str:
    """Build the base for ``vm`` once per run (or rebuild a stale one), under a lock.

    Creates that share the base wait on the lock; once the base is ready in this run
    it is never rebuilt again, so no clone can race a rebuild.
    """
    name = base_name(ctx.project, vm)
    state = ctx.bases.setdefault(name, BaseState())
    async with state.lock:
        if state.ready:
            return name
        want = base_stamp(ctx.project, vm)
        found = (await observe.inspect(ctx, name))[name]
        inst = found.instance
        if inst is not None:
            origin = inst.param.get(limayaml.PARAM_PROJECT)
            if inst.readable and origin != ctx.project:
                raise BackendError(
                    f"instance {name} on {ctx.runner.where} uses sand's reserved base name "
                    "but was not made by this project; rename or delete it",
                    backend=ctx.name,
                )
            fresh = (
                inst.readable
                and found.base_stamp is not None
                and found.base_stamp.stamp == want
                and found.base_stamp.project == ctx.project
            )
            if fresh:
                if inst.power == "running":  # someone started it; clones need it stopped
                    with journal.operation("base-stop", backend=ctx.name, vm=name, identity=name):
                        await vmops.stop(ctx, name)
                state.ready = True
                return name
            await _rebuild_cleanup(ctx, name, inst, journal)
        await _build_base(ctx, vm, name, want, journal)
        state.ready = True
        return name


async def _rebuild_cleanup(ctx: Ctx, name: str, inst: LimaInstance, journal: Journal) -> None:
    with journal.operation("base-delete", backend=ctx.name, vm=name, identity=name) as entry:
        await vmops.remove(ctx, name, readable=inst.readable)
        journal.step(entry, "deleted")


async def _build_base(ctx: Ctx, vm: DesiredVM, name: str, stamp: str, journal: Journal) -> None:
    doc = _base_doc(ctx.project, vm, name)
    body = limayaml.to_yaml(doc, header=f"sand base for project {ctx.project}; do not edit")
    sets = limayaml.set_expressions(limayaml.security_settings((), None))
    base = BaseStamp(ctx.project, name, stamp, vm.image, vm.user)
    with journal.operation(
        "base", backend=ctx.name, vm=name, identity=name, image=vm.image, stamp=stamp
    ) as entry:
        await vmops.create_instance(ctx, name, body, sets)
        journal.step(entry, "created")
        await vmops.write_sidecar(ctx, name, scripts.BASE_STAMP_FILE, base.to_bytes())
        journal.step(entry, "stamped")
    ctx.base_stamps[name] = base
