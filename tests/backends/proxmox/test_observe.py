"""Observation: one listing for a no-op, deep reads only where needed, ownership right."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.observed import Ownership
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import by_name, managed
from tests.fakepve_rig.fixtures import MakeRig
from tests.fakepve_rig.rig import FakePveRig

GIB = 1 << 30


async def test_created_vms_observe_with_one_listing_and_no_agent_call(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    entries = [{"name": f"dev-{i}", "memory": "2GiB", "disk": "12GiB"} for i in range(4)]
    desired = rig.desired(entries)
    for vm in desired:
        created = await backend.create(vm, journal)
        await backend.mark_converged(vm, created)
    rig.clear_log()

    obs = await backend.observe(desired)

    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]
    assert obs.requests == 1 and obs.unknown_reason is None
    assert rig.count(contains="/agent/") == 0
    seen = managed(obs.vms)
    assert sorted(seen) == [vm.name for vm in desired]
    for vm in desired:
        got = seen[vm.name]
        assert got.fingerprint == vm.fingerprint
        assert (got.cpus, got.memory, got.disk) == (vm.cpus, vm.memory, vm.disk)
        assert got.power == "running"
        assert got.marker is not None and got.marker.image == vm.image
        assert not got.deep


@pytest.mark.parametrize("n", [0, 1, 50, 400])
async def test_a_no_op_is_one_request_whatever_the_fleet_size(
    rig: FakePveRig, backend: ProxmoxBackend, n: int
) -> None:
    desired = rig.desired([{"name": f"vm-{i}", "memory": "1GiB", "disk": "8GiB"} for i in range(n)])
    for i, vm in enumerate(desired):
        rig.seed_managed(vm, 1000 + i)
    rig.clear_log()
    obs = await backend.observe(desired)
    assert rig.count() == 1
    assert len(obs.managed()) == n
    assert all(o.fingerprint == by_name(desired)[o.name].fingerprint for o in obs.vms)


async def test_deep_reads_only_for_vms_whose_fingerprint_differs(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    entries: list[dict[str, Any]] = [
        {"name": f"vm-{i}", "memory": "1GiB", "disk": "8GiB"} for i in range(10)
    ]
    for i, vm in enumerate(rig.desired(entries)):
        rig.seed_managed(vm, 200 + i)
    entries[3]["memory"] = "2GiB"
    entries[7]["cpus"] = 4
    desired = rig.desired(entries)
    rig.clear_log()

    obs = await backend.observe(desired)

    configs = rig.requests("GET", contains="/pending")
    assert sorted(r.path for r in configs) == [
        "/nodes/pve1/qemu/203/pending",
        "/nodes/pve1/qemu/207/pending",
    ]
    assert rig.count() == 3  # the listing and two config reads: <= 2 calls per changed VM
    seen = managed(obs.vms)
    assert seen["vm-3"].deep and seen["vm-7"].deep and not seen["vm-0"].deep
    assert seen["vm-3"].memory == 1 * GIB  # what is there, to be compared by the planner
    assert seen["vm-3"].fingerprint != by_name(desired)["vm-3"].fingerprint


async def test_a_vm_removed_from_the_manifest_is_deep_read_before_it_may_be_pruned(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    old = rig.desired([{"name": "gone", "protect": True}])[0]
    rig.seed_managed(old, 300)
    obs = await backend.observe([])
    (vm,) = obs.vms
    assert vm.ownership is Ownership.MANAGED and vm.deep and vm.protect


async def test_a_locked_vm_is_read_and_reported_locked(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    desired = rig.desired([{"name": "busy"}])
    rig.seed_managed(desired[0], 310, lock="backup")
    obs = await backend.observe(desired)
    (vm,) = obs.vms
    assert vm.lock == "backup" and vm.deep and vm.ownership is Ownership.MANAGED
    assert rig.count("GET", "/nodes/pve1/qemu/310/pending") == 1


def _human_clone(rig: FakePveRig, source: int, newid: int, name: str) -> None:
    """An operator clones a managed VM with their own root token (PVE copies tags and
    description verbatim), through the API as the web UI would."""
    api = rig.proxmoxer(rig.add_token("root@pam!ops", acl="root"))
    api.nodes("pve1").qemu(source).clone.post(newid=newid, name=name, full=1, pool=rig.pool)


async def test_ownership_of_everything_in_the_pool(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    desired = rig.desired([{"name": "web"}, {"name": "db"}])
    web = by_name(desired)["web"]
    made = await backend.create(web, journal)
    await backend.mark_converged(web, made)
    await asyncio.to_thread(_human_clone, rig, int(made.identity), 160, "web-copy")
    rig.seed_vm(150, "db", tags="team-a", description="a human's db")  # holds a desired name
    rig.seed_vm(151, "scratch")  # a human's VM, nothing to do with sand
    other = rig.desired([{"name": "web"}], project="other")[0]
    rig.seed_managed(other, 170)  # another project's VM of the same name
    rig.clear_log()

    obs = await backend.observe(desired)

    kinds = {vm.identity: (vm.name, vm.ownership) for vm in obs.vms}
    assert kinds == {
        made.identity: ("web", Ownership.MANAGED),
        "150": ("db", Ownership.UNMANAGED),
        "160": ("web-copy", Ownership.COPIED),
        "170": ("web", Ownership.OTHER_PROJECT),
    }
    copied = next(vm for vm in obs.vms if vm.identity == "160")
    assert copied.marker is not None and copied.marker.identity == made.identity
    assert any("160" in w and "copy" in w for w in obs.warnings)
    # Only the unmarked VM holding a desired name needed its config read.
    assert [r.path for r in rig.requests(contains="/pending")] == ["/nodes/pve1/qemu/150/pending"]
    assert "9000" not in kinds  # the template is not sand's business


async def test_a_template_carrying_our_marker_is_never_managed(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    vm = rig.desired([{"name": "golden-copy"}])[0]
    rig.seed_managed(vm, 400, template=True, status="stopped")
    obs = await backend.observe([])
    (seen,) = obs.vms
    assert seen.template and seen.ownership is Ownership.UNMANAGED
    assert obs.managed() == []


async def test_a_failing_listing_means_unknown_never_empty(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.fail("GET", "/cluster/resources", 503, "Service Unavailable")
    obs = await backend.observe(rig.desired([{"name": "a"}]))
    assert obs.unknown_reason is not None and "503" in obs.unknown_reason
    assert obs.vms == ()
    assert rig.count("GET", "/cluster/resources") == backend.ctx.client.retry.attempts


async def test_a_briefly_failing_listing_is_retried(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.fail("GET", "/cluster/resources", 502, "Bad Gateway", times=2)
    obs = await backend.observe([])
    assert obs.unknown_reason is None
    assert rig.count("GET", "/cluster/resources") == 3


async def test_an_unreachable_api_means_unknown(rig: FakePveRig) -> None:
    backend = rig.make_backend(port=1)  # nothing listens there
    obs = await backend.observe([])
    assert obs.unknown_reason is not None and "connection refused by" in obs.unknown_reason
    await backend.close()


async def test_vms_on_an_offline_node_stay_managed_with_unknown_power(
    fakepve_factory: MakeRig, journal: Journal
) -> None:
    rig = fakepve_factory(nodes=("pve1", "pve2"))
    backend = rig.make_backend()
    desired = rig.desired([{"name": "a"}, {"name": "b"}])
    rig.seed_managed(desired[0], 500, node="pve1")
    rig.seed_managed(desired[1], 501, node="pve2")
    rig.run(rig.pve.set_node_offline, "pve2")
    obs = await backend.observe(desired)
    seen = managed(obs.vms)
    assert seen["b"].power == "unknown" and seen["a"].power == "running"
    assert obs.unknown_reason is None and rig.count() == 1
    await backend.close()


async def test_our_marker_in_another_pool_is_left_alone(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    """Two backends of one project on one cluster, each with its pool, never prune
    each other's VMs (nor one an operator moved out of the pool)."""
    rig.run(rig.pve.pools.__setitem__, "other-pool", set())
    vm = rig.desired([{"name": "elsewhere"}])[0]
    rig.seed_managed(vm, 800, pool="other-pool")
    obs = await backend.observe([])  # the root-less token cannot see it at all ...
    assert obs.vms == ()
    broad = rig.make_backend(token_file=str(rig.add_token("sand@pve!broad", acl="root")))
    (seen,) = (await broad.observe([])).vms  # ... and a broad one does not claim it
    assert seen.ownership is Ownership.UNMANAGED and "other-pool" in seen.details["note"]
    (seen,) = (await broad.observe([vm])).vms
    assert seen.ownership is Ownership.UNMANAGED
    await broad.close()


async def test_a_no_op_with_golden_bases_is_still_one_request(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """Bases and the VMs cloned from them are read off the listing's tags alone."""
    import threading
    import time

    from sand.desired import build_desired
    from sand.guest.endpoint import GuestEndpoint
    from sand.manifest.models import Manifest

    data = rig.manifest([{"name": f"vm-{i}", "memory": "1GiB"} for i in range(3)])
    data["images"] = {"wb": {"packages": ["jq"]}}
    data["defaults"]["image"] = "wb"
    desired = list(build_desired(Manifest.model_validate(data)).vms)
    base = desired[0].base
    assert base is not None

    async def provision(_: object, endpoint: GuestEndpoint) -> None:
        return None

    stop = threading.Event()

    def agents() -> None:  # the build machine's guest agent reports an address
        while not stop.is_set():
            for vm in rig.vms():
                if vm.config.get("net0"):
                    rig.set_agent_ip(vm.vmid, "10.99.0.7")
            time.sleep(0.02)

    thread = threading.Thread(target=agents, daemon=True)
    thread.start()
    try:
        await backend.build_base(base, provision, journal)
    finally:
        stop.set()
        thread.join()
    for vm in desired:
        created = await backend.create(vm, journal, from_base=True)
        await backend.mark_converged(vm, created)
    rig.clear_log()
    obs = await backend.observe(desired)
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]
    (seen,) = obs.bases
    assert seen.ready and seen.fingerprint == base.fingerprint
    assert sorted(seen.made) == ["vm-0", "vm-1", "vm-2"]
    assert all(o.fingerprint == by_name(desired)[o.name].fingerprint for o in obs.managed())
