"""What a create costs on Proxmox, request by request (fakepve's request log).

A fresh clone asks PVE nothing sand already knows: no listing per VM (the
observation's serves, unless it shows a VM this entry might adopt), no config read
of the clone (its template's, read once per batch, by preflight here, says what it
holds), no status
read of a VM it just cloned stopped, no read-back of the VM it returns, no id asked for
per VM (one ``/cluster/nextid`` a batch, counted on from there). What stays: the clone
and its task, one config write (with the converged marker when
nothing follows the create), the start and its task. A disk larger than the
template's adds the resize and its task (PVE resizes on its own endpoint only);
without the project's lease, the check for a parallel run's duplicate adds a
listing shared by the checks of clones that end together. The storage's kind, which
sizes the clone slots, comes from preflight's read of the storages."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from sand.backends.lease import LeaseHolder
from sand.backends.protocol import PreflightItem
from sand.backends.proxmox import vmops
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

PER_VM = {
    "POST /nodes/pve1/qemu/{id}/clone": 1,
    "PUT /nodes/pve1/qemu/{id}/config": 1,
    "POST /nodes/pve1/qemu/{id}/status/start": 1,
    "GET /nodes/pve1/tasks/{upid}/status": 2,  # clone, start: ended at once
}
RESIZE = {"PUT /nodes/pve1/qemu/{id}/resize": 1, "GET /nodes/pve1/tasks/{upid}/status": 1}
# The template's config, read once per batch: here by preflight (sand's role lacks
# VM.Config.CDROM, so it checks the template has a cloud-init drive) and reused by the
# clones, so nothing of it is spent under the lease.
PER_BATCH: dict[str, int] = {}
# The clones' ids: one nextid per batch, then counted (sand.backends.proxmox.vmids);
# under the lease the count goes on from the id the lease object's making asked for.
IDS = {"GET /cluster/nextid": 1}
TEMPLATE_DISK = "4GiB"  # the rig's template: a VM of that size is not resized


def _endpoint(method: str, path: str) -> str:
    path = re.sub(r"/qemu/\d+", "/qemu/{id}", path)
    return f"{method} {re.sub(r'/tasks/[^/]+', '/tasks/{upid}', path)}"


def _spent(rig: FakePveRig) -> Counter[str]:
    return Counter(_endpoint(r.method, r.path) for r in rig.log)


def _times(per: dict[str, int], n: int) -> Counter[str]:
    return Counter({k: v * n for k, v in per.items()})


@pytest.mark.parametrize("n", [1, 10])
async def test_a_cold_create_under_the_lease_costs_five_requests_per_vm(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, n: int
) -> None:
    vms = rig.desired([{"name": f"c-{i}", "disk": TEMPLATE_DISK} for i in range(n)])
    await backend.observe(vms)  # as apply does: the plan's observation and preflight first
    await backend.preflight([PreflightItem(vm, "create") for vm in vms])
    async with backend.lease(LeaseHolder.here(command="test"), ttl=60.0):
        rig.clear_log()
        made = await asyncio.gather(*(backend.create(vm, journal, converged=True) for vm in vms))
        spent = _spent(rig)
    assert spent == _times(PER_VM, n) + _times(PER_BATCH, 1)
    assert len(rig.vms()) == n and journal.pending() == []
    # What create returned without reading it back is what PVE holds: converged.
    for vm, observed in zip(vms, made, strict=True):
        read, _ = await vmops.read_vm(
            backend.ctx, str(observed.node), observed.identity, vm, pool=rig.pool
        )
        assert observed == read
        assert read.marker is not None and read.marker.fingerprint == vm.fingerprint


@pytest.mark.parametrize("n", [1, 10])
async def test_without_the_lease_clones_ending_together_share_the_duplicate_check(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, n: int
) -> None:
    vms = rig.desired([{"name": f"c-{i}"} for i in range(n)])  # disks larger: resized
    await backend.observe(vms)
    await backend.preflight([PreflightItem(vm, "create") for vm in vms])
    # A listing takes as long as on a busy cluster (here 0.5 s): clones ending together
    # ask while one is under way, however a loaded machine spreads their ends.
    rig.delay_requests("GET", "/cluster/resources", 0.5)
    rig.clear_log()
    made = await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    spent = _spent(rig)
    listings = spent.pop("GET /cluster/resources")
    assert 1 <= listings <= max(1, n // 2), listings
    assert spent == _times(PER_VM, n) + _times(RESIZE, n) + _times(PER_BATCH, 1) + Counter(IDS)
    for vm, observed in zip(vms, made, strict=True):
        read, _ = await vmops.read_vm(
            backend.ctx, str(observed.node), observed.identity, vm, pool=rig.pool
        )
        assert observed == read
        assert read.marker is not None and read.marker.fingerprint == ""  # not yet marked


@pytest.mark.parametrize("bridge", ["same", "other"])
async def test_each_clone_keeps_a_mac_of_its_own_though_the_template_is_read_once(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, bridge: str
) -> None:
    template = rig.templates()[0]
    if bridge == "other":  # the clone's NIC is rewritten onto the backend's bridge
        template.config["net0"] = vmops.with_bridge(template.config["net0"], "vmbr9")
        rig.grant(rig.token_id, "/sdn/zones/localnetwork/vmbr9", "SDN.Use")
    template_mac = vmops.mac_of(template.config["net0"])
    vms = rig.desired([{"name": f"m-{i}"} for i in range(3)])
    await backend.observe(vms)
    await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    nets = [vm.config["net0"] for vm in rig.vms()]
    macs = {vmops.mac_of(net) for net in nets}
    assert len(macs) == 3 and template_mac not in macs and None not in macs
    assert {vmops.bridge_of(net) for net in nets} == {rig.bridge}
    assert all(net.startswith("virtio=") for net in nets)  # the model kept
    # Only a NIC that moves to another bridge costs a read of the clone (for its MAC).
    reads = rig.count("GET", contains="/config")
    assert reads == (1 if bridge == "same" else 4), reads


async def test_a_create_whose_name_the_observation_shows_lists_afresh_and_adopts(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    first = await backend.create(vm, journal)
    await backend.observe([vm])  # shows dev
    again = await backend.create(vm, journal)
    assert again.identity == first.identity and len(rig.vms()) == 1
    assert rig.count("POST", contains="/clone") == 1


async def test_an_adopted_vm_created_converged_is_marked_converged(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    await backend.create(vm, journal)
    await backend.observe([vm])  # shows dev, not yet marked
    again = await backend.create(vm, journal, converged=True)
    assert again.marker is not None and again.marker.fingerprint == vm.fingerprint
    observed = (await backend.observe([vm])).vms
    assert [o.marker.fingerprint for o in observed if o.marker] == [vm.fingerprint]


async def test_clones_of_a_base_built_this_run_ask_for_no_listing_nor_its_config(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """The build adds the base to the rows the observation read (and its config to the
    templates read this batch): every create of the run finds it there."""
    from sand.desired import build_desired
    from sand.guest.endpoint import GuestEndpoint
    from sand.manifest.models import Manifest

    data = rig.manifest([{"name": f"vm-{i}", "disk": TEMPLATE_DISK} for i in range(3)])
    data["images"] = {"wb": {"packages": ["jq"]}}
    data["defaults"]["image"] = "wb"
    desired = list(build_desired(Manifest.model_validate(data)).vms)
    base = desired[0].base
    assert base is not None
    await backend.observe(desired)  # before the base exists, as in one apply

    async def provision(_: object, endpoint: GuestEndpoint) -> None:
        return None

    async def agents() -> None:  # the build machine's guest agent reports an address
        while True:
            for vm in rig.vms():
                if vm.config.get("net0"):
                    rig.set_agent_ip(vm.vmid, "10.99.0.7")
            await asyncio.sleep(0.02)

    reporter = asyncio.create_task(agents())
    try:
        await backend.build_base(base, provision, journal)
    finally:
        reporter.cancel()
    async with backend.lease(LeaseHolder.here(command="test"), ttl=60.0):
        rig.clear_log()
        made = await asyncio.gather(
            *(backend.create(vm, journal, from_base=True, converged=True) for vm in desired)
        )
        spent = _spent(rig)
    assert spent == _times(PER_VM, 3)  # the ids counted on from the base's build
    assert all(m.marker is not None and m.marker.base == base.fingerprint for m in made)
