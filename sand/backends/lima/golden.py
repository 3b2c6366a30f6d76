"""Golden bases on Lima: a provisioned, stopped instance VMs are ``limactl clone``-d from.

The one kind of base sand makes on Lima (the clone-source bases of earlier versions are
retired: ``create.py`` says why, ``golden_marks`` how the plan deletes what is left). A
golden base is named ``sand-base-<project>-<fp12>`` (its fingerprint's first twelve hex
digits; a retired base's name carries eight), created from the base's source with the
base config and this project's ``param`` origin, started, handed to the caller to
provision, stopped, and only then stamped (its ``sand-base.json`` names the
fingerprint): an instance of that name without the stamp is a build that did not finish
and is never cloned from. Every step is journalled under one ``base`` entry, which the
journal replay settles like any base's (stamped: kept; not: removed).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from sand.backends.lima import guest as lima_guest
from sand.backends.lima import limayaml, observe, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.golden_marks import golden_instance, is_golden, is_retired
from sand.backends.lima.marker import BaseStamp, new_uid
from sand.backends.protocol import BaseProvisioner
from sand.desired.spec import DesiredBase
from sand.errors import BackendError, SandError
from sand.manifest.backends.lima import RESERVED_PREFIX
from sand.observed import ObservedBase
from sand.state.journal import Journal, never


async def build(
    ctx: Ctx, base: DesiredBase, provision: BaseProvisioner, journal: Journal
) -> ObservedBase:
    name = golden_instance(ctx.project, base)
    found = (await observe.inspect(ctx, name))[name]
    if found.instance is not None:
        stamp = found.base_stamp
        if stamp is not None and stamp.golden == base.fingerprint:
            ctx.golden[base.fingerprint] = name  # built meanwhile (another run): use it
            return ObservedBase(ctx.name, base.name, name, base.fingerprint, True)
        if not is_golden(ctx, found.instance, stamp):
            raise BackendError(
                f"instance {name} on {ctx.runner.where} uses sand's reserved base name but "
                "was not made by this project; rename or delete it",
                backend=ctx.name,
            )
        with journal.operation("base-delete", backend=ctx.name, vm=name, identity=name):
            await vmops.remove(ctx, name, readable=found.instance.readable)
    doc = limayaml.base_config(image=base.source, user=base.user, project=ctx.project, name=name)
    body = limayaml.to_yaml(doc, header=f"golden base {base.name} of project {ctx.project}")
    sets = limayaml.set_expressions(limayaml.security_settings((), None))
    with journal.operation(
        "base",
        backend=ctx.name,
        vm=name,
        identity=name,
        image=base.source,
        fingerprint=base.fingerprint,
        golden=base.name,
    ) as entry:
        try:
            await vmops.create_instance(ctx, name, body, sets)
            journal.step(entry, "created")
            await vmops.start(ctx, name)
            journal.step(entry, "started")
            machine = await observe.observe_one(ctx, name)
            # Pinned under a key of its own: a rebuilt base is a new machine with new keys.
            machine = replace(machine, details={**machine.details, "uid": new_uid()})
            await provision(base, await lima_guest.endpoint(ctx, None, machine))
            journal.step(entry, "provisioned")
            await vmops.stop(ctx, name)
            journal.step(entry, "stopped")
            stamp = BaseStamp(
                ctx.project,
                name,
                base.fingerprint,
                base.source,
                base.user,
                golden=base.fingerprint,
                image_name=base.name,
                backend=ctx.name,
            )
            await vmops.write_sidecar(ctx, name, scripts.BASE_STAMP_FILE, stamp.to_bytes())
            journal.step(entry, "stamped")
        except SandError:
            # Not stamped, so never cloned from; removed now, else by the next plan.
            with contextlib.suppress(SandError):
                await vmops.remove(ctx, name, readable=True)
            raise
    observe.note(ctx, name)
    ctx.golden[base.fingerprint] = name
    return ObservedBase(ctx.name, base.name, name, base.fingerprint, True)


async def source_for(ctx: Ctx, base: DesiredBase) -> str:
    """The ready golden base instance VMs of ``base`` are cloned from (stopped first when
    someone started it: Lima clones only a stopped instance)."""
    name = ctx.golden.get(base.fingerprint) or golden_instance(ctx.project, base)
    found = (await observe.inspect(ctx, name))[name]
    stamp = found.base_stamp
    if found.instance is None or stamp is None or stamp.golden != base.fingerprint:
        raise BackendError(
            f"golden base {base.name!r} ({base.fingerprint}) is not ready on "
            f"{ctx.runner.where}: nothing is cloned from a base that is not built",
            backend=ctx.name,
        )
    if found.instance.power == "running":
        await vmops.stop(ctx, name)
    return name


async def delete(ctx: Ctx, base: ObservedBase, journal: Journal) -> str:
    name = base.identity
    if not name.startswith(RESERVED_PREFIX):
        raise BackendError(f"refusing to delete {name}: not a base instance", backend=ctx.name)
    found = (await observe.inspect(ctx, name))[name]
    inst = found.instance
    if inst is None:
        return "already gone"
    if not is_golden(ctx, inst, found.base_stamp) and not is_retired(ctx, inst, found.base_stamp):
        raise BackendError(
            f"refusing to delete {name}: it is not a base sand built for project "
            f"{ctx.project} on this backend",
            backend=ctx.name,
        )
    if base.fingerprint:
        # Every instance's marker, read afresh: one made from it since the plan keeps it.
        listing = await observe.observe(ctx)
        made = [
            v.name
            for v in listing.vms
            if v.marker is not None and v.marker.base == base.fingerprint
        ]
        if made:
            return f"kept: VMs were made from it since the plan ({', '.join(made)})"
    if inst.power == "running":
        return "kept: it is running"
    with journal.operation(
        "base-delete", backend=ctx.name, vm=name, identity=name, failed_when=never
    ):
        await vmops.remove(ctx, name, readable=inst.readable)
    observe.forget(ctx, name)
    ctx.golden.pop(base.fingerprint, None)
    return "deleted"
