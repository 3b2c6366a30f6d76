"""Update in place: one config write between the power steps the change needs.

Requests on the VM for a one-field change (memory of a running VM, nothing to provision
after it, under the project's lease): the plan's own deep read of it (``GET …/pending``,
which gives its config and digest) is reused, then the shutdown and its task, one config
PUT (the change, the converged marker, the digest of the config the plan read), the
start and its task: six. The VM returned is built from what was written, not read back
(the next observation verifies it).

What keeps this as safe as reading the VM afresh before acting:
- The write carries the digest of the whole config the plan read (PVE's SHA-1 of the
  file, pending section and snapshots included): a config anyone changed since is
  refused "checksum mismatch", and then the VM is read afresh and checked again
  (ownership, incarnation, lock) before the write is sent with that read's digest.
- Without the project's lease another sand run may act between the plan and now: the
  VM is read afresh first, as before.
- CPU and memory are written while the VM is stopped. On a running VM PVE keeps them
  pending until its next start (qemu-server ``update_vm_api`` →
  ``vmconfig_hotplug_pending`` skips them) while tags and description, "fast plug"
  options, apply at once: a marker written with them would call converged a VM whose
  change still waits. Stopped, ``vmconfig_apply_pending`` applies the whole write.
- A write PVE refuses (parameter verification comes before anything is written) writes
  nothing, the marker included: the next plan shows the change again. What follows the
  write (a resize, a start) shows in the listing (``maxdisk``, ``status``) if it fails.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import firewall, units, vmops
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.lifecycle import (
    NEEDS_RESTART,
    UPDATABLE,
    converged_marker,
    fresh_for,
    marker_description,
    protected_by_sand,
    refuse,
    tracker,
)
from sand.backends.proxmox.observe import is_protected
from sand.desired import DesiredVM
from sand.observed import Marker, ObservedVM
from sand.state.journal import Journal, never

# How old the plan's read of a VM may be and still stand for a fresh one. A run nobody
# confirms acts within a second of its plan; a plan a person read for longer than this
# before saying yes is read again (two requests): the write's digest guards the config,
# but nothing guards the shutdown before it from a VM swapped in at that id meanwhile.
PLAN_READ_SECS = 30.0


def planned_config(ctx: Ctx, current: ObservedVM) -> dict[str, Any] | None:
    """The config the plan's observation read of ``current`` (with its digest), when it
    may stand for a fresh read: under the project's lease, read by this very backend
    for this incarnation, recently. None: read the VM afresh."""
    if not ctx.leases_held or not current.deep or current.marker is None:
        return None
    if time.monotonic() - ctx.observed_at > PLAN_READ_SECS:
        return None
    config = ctx.observed_configs.get(current.identity)
    if config is None or not config.get("digest"):
        return None
    described = desc.parse_description(config.get("description"))
    if described is None or described.incarnation != current.marker.incarnation:
        return None
    return dict(config)


async def update(
    ctx: Ctx,
    vm: DesiredVM,
    current: ObservedVM,
    fields: Sequence[str],
    journal: Journal,
    *,
    converged: bool = False,
) -> ObservedVM:
    """``converged``: nothing follows the update (no provisioning, no secrets), so its
    one config write carries the marker ``mark_converged`` would write next."""
    unknown = sorted(set(fields) - set(UPDATABLE))
    if unknown:
        raise ProxmoxError(ctx.name, f"cannot change {', '.join(unknown)} in place")
    config = planned_config(ctx, current)
    if config is not None:
        refuse(ctx, current, "change")
        fresh, node = current, current.node or ""
    else:
        fresh, config, node = await fresh_for(ctx, current, vm, "change")
    vmid = fresh.identity
    if "protect" in fields and is_protected(config) and not protected_by_sand(config):
        # The planner never proposes this; refuse a caller that does.
        raise ProxmoxError(
            ctx.name,
            f"refusing to lift the protection of VM {vmid} ({vm.name}): protection was set "
            "outside sand; clear it in PVE to let sand manage it",
        )
    path = vmops.vm_path(node, vmid)
    assert fresh.marker is not None
    with journal.operation(
        "update",
        backend=ctx.name,
        vm=vm.name,
        identity=vmid,
        node=node,
        fields=list(fields),
        incarnation=fresh.marker.incarnation,
        failed_when=never,
    ) as entry:
        track = tracker(journal, entry)
        was_running = fresh.power == "running"
        want_running = vm.state == "running" if "state" in fields else was_running
        running = was_running
        if running and (NEEDS_RESTART & set(fields)):
            # CPU and memory need a restart: change them on a stopped VM, so nothing is left
            # pending (PVE keeps changes to a running VM pending until its next start).
            await vmops.shutdown(ctx, node, vmid, track=track)
            running = False
            journal.step(entry, "stopped")
        if "egress" in fields:
            # Before the write whose marker vouches for it: a run cut between the two
            # leaves a VM the next plan still sees with its old egress.
            await firewall.write(ctx, node, vmid, vm, fresh=False)
            journal.step(entry, "egress")
        marker = _marker(ctx, vm, fresh, config) if converged else None
        params = _params(ctx, vm, fresh, fields, config, marker)
        if params:
            try:
                await ctx.client.put(f"{path}/config", **params, digest=config.get("digest"))
            except ProxmoxError as e:
                if e.kind is not ErrorKind.CONFLICT:
                    raise
                # Changed since it was read: read it again, check it again, write again.
                fresh, config, node = await fresh_for(ctx, current, vm, "change")
                path = vmops.vm_path(node, vmid)  # where it is now (it may have moved)
                marker = _marker(ctx, vm, fresh, config) if converged else None
                params = _params(ctx, vm, fresh, fields, config, marker)
                await ctx.client.put(f"{path}/config", **params, digest=config.get("digest"))
            journal.step(entry, "configured")
        size = fresh.disk
        if "disk" in fields:
            disk = vmops.boot_disk(config)
            if disk is None:
                raise ProxmoxError(ctx.name, f"VM {vmid} has no disk to resize")
            if vm.disk < disk[1]:
                raise ProxmoxError(
                    ctx.name,
                    f"VM {vmid} disk {disk[0]} is {disk[1]} bytes; PVE cannot shrink disks",
                )
            if vm.disk > disk[1]:
                await vmops.resize(ctx, node, vmid, disk[0], vm.disk, track=track)
                journal.step(entry, "resized")
            size = vm.disk
        if want_running and not running:
            await vmops.start(ctx, node, vmid, track=track)
            journal.step(entry, "started")
            running = True
        elif running and not want_running:
            await vmops.shutdown(ctx, node, vmid, track=track)
            journal.step(entry, "stopped")
            running = False
    restarted = running != was_running or bool(NEEDS_RESTART & set(fields))
    return _result(vm, fresh, fields, marker, running=running, disk=size, restarted=restarted)


def _marker(ctx: Ctx, vm: DesiredVM, fresh: ObservedVM, config: Mapping[str, Any]) -> Marker:
    assert fresh.marker is not None
    seen = fresh.marker.incarnation
    return converged_marker(ctx, vm, fresh.identity, config, None, seen=seen)


def _params(
    ctx: Ctx,
    vm: DesiredVM,
    fresh: ObservedVM,
    fields: Sequence[str],
    config: Mapping[str, Any],
    marker: Marker | None,
) -> dict[str, Any]:
    """The one config write: the fields changed, and the converged marker with them."""
    assert fresh.marker is not None
    params: dict[str, Any] = {}
    if "cpus" in fields:
        params.update(cores=vm.cpus, sockets=1)
    if "cpu" in fields and vm.cpu:
        params["cpu"] = vm.cpu
    if "memory" in fields:
        params["memory"] = units.memory_mib(vm.memory)
    if "protect" in fields:
        params["protection"] = 1 if vm.protect else 0
        params["description"] = marker_description(ctx, config, fresh.marker, protect=vm.protect)
    unfiltered = firewall.denies(vm.egress) and not firewall.nic_filtered(config.get("net0"))
    if "egress" in fields and unfiltered:
        params["net0"] = firewall.with_firewall(config.get("net0"))
    if marker is not None:
        params["tags"] = mk.merge_tags(config.get("tags"), marker)
        params["description"] = desc.merge_description(
            config.get("description"),
            marker,
            protect=vm.protect,
            **{firewall.MARKER_KEY: vm.infra().get("egress")},
        )
    return params


def _result(
    vm: DesiredVM,
    fresh: ObservedVM,
    fields: Sequence[str],
    marker: Marker | None,
    *,
    running: bool,
    disk: int | None,
    restarted: bool,
) -> ObservedVM:
    """The VM as the update left it, from what was written (nothing is read back)."""
    status = "running" if running else "stopped"
    changed: dict[str, Any] = {"power": status, "details": {**fresh.details, "status": status}}
    if restarted:  # a start applies whatever was pending; a stop leaves nothing running
        changed["pending"] = {}
    if "cpus" in fields:
        changed["cpus"] = vm.cpus
    if "cpu" in fields and vm.cpu:
        changed["cpu"] = vm.cpu
    if "memory" in fields:
        changed["memory"] = vm.memory
    if "disk" in fields:
        changed["disk"] = disk
    if "protect" in fields:
        changed.update(protect=vm.protect, operator_protected=False)
    if "egress" in fields:
        enforced = vm.infra().get("egress")
        changed["egress"] = str(enforced) if enforced is not None else None
    if marker is not None:  # the converged marker went with the write
        changed["marker"] = marker
    return replace(fresh, **changed)
