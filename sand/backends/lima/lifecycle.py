"""Update, delete, rename, protect and mark converged of sand's Lima instances (crash
recovery: ``recover.py``). Each refuses what this project does not manage first, and
journals its intent before the first limactl call."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sand.backends.capabilities import Mutability, fields_with
from sand.backends.lima import egress, guest, limayaml, observe, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.marker import Sidecar, new_uid
from sand.desired import DesiredVM
from sand.errors import BackendError
from sand.guest.pinfile import forget_machine
from sand.observed import Marker, ObservedVM, Ownership, SecretsRecord
from sand.state.journal import Journal, JournalEntry

# Which fields change in place, need a restart or force replacement: what planning
# reads (``Capabilities``), and what this module's update path follows.
FIELD_POLICY: Mapping[str, Mutability] = {
    "image": Mutability.REPLACE,
    "cpus": Mutability.RESTART,
    "memory": Mutability.RESTART,
    "disk": Mutability.GROW_ONLY,
    "ports": Mutability.RESTART,
    "state": Mutability.IN_PLACE,
    "protect": Mutability.IN_PLACE,
    # Enforced by the QEMU it runs in (egress.py): a new policy takes a start through the shim.
    "egress": Mutability.RESTART,
}

# Changed by ``limactl edit`` (the instance must be stopped for it): what needs a
# restart, and the disk, which grows only.
CONFIG_FIELDS = frozenset(fields_with(FIELD_POLICY, Mutability.RESTART, Mutability.GROW_ONLY)) - {
    "egress"
}


async def update(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, fields: Sequence[str], journal: Journal
) -> ObservedVM:
    vmops.require_managed(ctx, current, "update")
    wanted = set(fields)
    if "image" in wanted:
        raise BackendError(
            f"the image of {vm.name} cannot change in place (it forces replacement)",
            backend=ctx.name,
        )
    if "disk" in wanted and current.disk is not None and vm.disk < current.disk:
        raise BackendError(
            f"the disk of {vm.name} cannot shrink in place ({current.disk} -> {vm.disk} "
            "bytes; it forces replacement)",
            backend=ctx.name,
        )
    if "protect" in wanted and not vm.protect and current.operator_protected:
        raise BackendError(
            f"refusing to unprotect {vm.name}: its protection was set outside sand "
            "(`limactl unprotect` it to let sand manage it)",
            backend=ctx.name,
        )
    config_change = bool(wanted & CONFIG_FIELDS)
    egress_change = "egress" in wanted
    name = current.identity
    power = current.power
    target = vm.state if "state" in wanted else power
    with journal.operation(
        "update",
        backend=ctx.name,
        vm=vm.name,
        identity=name,
        fields=sorted(wanted),
        uid=current.details.get("uid", ""),
    ) as entry:
        if (config_change or egress_change) and power == "running":
            await vmops.stop(ctx, name)
            journal.step(entry, "stopped")
            power = "stopped"
        if egress_change:  # the next start goes through the shim, or not (egress.py)
            egress.prepare(ctx, vm, name)
            journal.step(entry, "egress written")
        if config_change:
            settings = limayaml.vm_edit_settings(vm, ctx.bundle)
            await vmops.limactl(
                ctx, "edit", name, *vmops.set_flags(limayaml.set_expressions(settings))
            )
            journal.step(entry, "edited")
        if "protect" in wanted and vm.protect != current.protect:
            await protect(ctx, vm, current, journal, entry)
        if target == "running" and power != "running":
            await vmops.start(ctx, name)
            journal.step(entry, "started")
        elif target == "stopped" and power == "running":
            await vmops.stop(ctx, name)
            journal.step(entry, "stopped")
    return await observe.observe_one(ctx, name)


async def protect(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, journal: Journal, entry: JournalEntry
) -> None:
    """``limactl protect`` / ``unprotect`` as ``vm`` wants, a step of the update ``entry``."""
    name = current.identity
    if vm.protect:
        # Recorded first: a protection sand set is never taken for an operator's.
        await vmops.write_sidecar(
            ctx, name, scripts.MARKER_FILE, sidecar(ctx, vm, current, protect=True)
        )
    await vmops.limactl(ctx, "protect" if vm.protect else "unprotect", name)
    journal.step(entry, "protected" if vm.protect else "unprotected")


async def delete(ctx: Ctx, current: ObservedVM, journal: Journal) -> None:
    vmops.require_managed(ctx, current, "delete")
    if current.protect:
        raise BackendError(
            f"refusing to delete {current.name}: it is protected (limactl unprotect first)",
            backend=ctx.name,
        )
    name = current.identity
    found = (await observe.inspect(ctx, name))[name]
    if found.instance is None:
        observe.forget(ctx, name)
        forget_machine(guest.pin_family(current))
        return  # already gone
    fresh = observe.observed(ctx, found.instance, found.sidecar)
    if fresh.ownership is not Ownership.MANAGED or (
        found.sidecar is not None and found.sidecar.uid != current.details.get("uid", "")
    ):
        raise BackendError(
            f"refusing to delete {name}: it changed since it was observed "
            f"(now {fresh.ownership.value})",
            backend=ctx.name,
        )
    if fresh.protect:
        raise BackendError(
            f"refusing to delete {name}: it is protected (limactl unprotect first)",
            backend=ctx.name,
        )
    with journal.operation(
        "delete",
        backend=ctx.name,
        vm=current.name,
        identity=name,
        uid=found.sidecar.uid if found.sidecar is not None else "",
    ) as entry:
        await vmops.limactl(ctx, "delete", "--force", name, timeout=ctx.timeouts.stop)
        journal.step(entry, "deleted")
    observe.forget(ctx, name)  # a replace creates it again right after
    # Its host keys died with it: a deleted VM leaves no pin in sand's known_hosts.
    forget_machine(guest.pin_family(current))


async def rename(ctx: Ctx, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
    """``limactl rename`` a replacement to its final name (the instance must stop for it).

    Lima's rename moves the directory's files but not ``protected``, so protection
    is set again; the sidecar is rewritten with the new identity (until it is, the
    instance reads as a copy and nothing touches it; recovery finishes the rewrite).
    """
    vmops.require_managed(ctx, current, "rename")
    vmops.check_name(ctx, name)
    old = current.identity
    if (await observe.inspect(ctx, name))[name].instance is not None:
        raise BackendError(
            f"cannot rename {old} to {name}: an instance named {name} exists",
            backend=ctx.name,
        )
    marker = current.marker or Marker(ctx.project, old, old, fingerprint="")
    # The same VM under its final name: incarnation, stamps and fingerprints kept.
    renamed = Sidecar(
        dataclasses.replace(marker, name=name, identity=name, backend=ctx.name),
        uid=current.details.get("uid") or new_uid(),
        backend=ctx.name,
        protect=current.protect,
    )
    with journal.operation("rename", backend=ctx.name, vm=name, identity=old, to=name) as entry:
        running = current.power == "running"
        if running:
            await vmops.stop(ctx, old)
            journal.step(entry, "stopped")
        sets = limayaml.set_expressions({f"param.{limayaml.PARAM_INSTANCE}": name})
        await vmops.limactl(
            ctx, "rename", old, name, *vmops.set_flags(sets), timeout=ctx.timeouts.clone
        )
        journal.step(entry, "renamed")
        egress.renamed(ctx, name)  # its proxy's log under its final name
        await vmops.write_sidecar(ctx, name, scripts.MARKER_FILE, renamed.to_bytes())
        journal.step(entry, "marked")
        if current.protect:
            await vmops.limactl(ctx, "protect", name)
            journal.step(entry, "protected")
        if running:
            await vmops.start(ctx, name)
            journal.step(entry, "started")
    observe.forget(ctx, old)
    observe.note(ctx, name)
    return await observe.observe_one(ctx, name)


async def finish_rename(ctx: Ctx, old: str, new: str) -> None:
    """Rewrite the sidecar of an instance renamed from ``old`` to ``new`` (recovery)."""
    side = (await observe.inspect(ctx, new))[new].sidecar
    if side is None:
        return
    fixed = Sidecar(
        dataclasses.replace(side.marker, name=new, identity=new, backend=ctx.name),
        uid=side.uid,
        backend=ctx.name,
        protect=side.protect,
    )
    await vmops.write_sidecar(ctx, new, scripts.MARKER_FILE, fixed.to_bytes())


async def mark_converged(
    ctx: Ctx, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
) -> None:
    vmops.require_managed(ctx, current, "mark")
    data = sidecar(ctx, vm, current, protect=vm.protect, converged=True, secrets=secrets)
    await vmops.write_sidecar(ctx, current.identity, scripts.MARKER_FILE, data)


def sidecar(
    ctx: Ctx,
    vm: DesiredVM,
    current: ObservedVM,
    *,
    protect: bool,
    converged: bool = False,
    secrets: SecretsRecord | None = None,
) -> bytes:
    """The sidecar for ``current``: its incarnation and creation time kept, this
    backend's name written, and the secrets stamp ``secrets`` says was delivered (None:
    the one it has)."""
    fp = current.marker.fingerprint if current.marker else ""
    gfp = current.marker.guest_fingerprint if current.marker else ""
    if secrets is None:  # nothing delivered this run: keep what the VM records
        kept = current.marker
        secrets = SecretsRecord(kept.secrets, kept.secrets_at) if kept else None
    return Sidecar(
        Marker(
            project=ctx.project,
            name=vm.name,
            identity=current.identity,
            fingerprint=vm.fingerprint if converged else fp,
            guest_fingerprint=vm.guest_fingerprint if converged else gfp,
            image=vm.image,
            secrets=secrets.stamp if secrets else "",
            secrets_at=secrets.delivered_at if secrets and secrets.stamp else 0,
            created_at=current.marker.created_at if current.marker else 0,
            # Like its creation time, the base it was cloned from is kept on every write.
            base=current.marker.base if current.marker else "",
            pool=vm.spare_of,
        ),
        uid=current.details.get("uid") or new_uid(),
        backend=ctx.name,
        protect=protect,
    ).to_bytes()
