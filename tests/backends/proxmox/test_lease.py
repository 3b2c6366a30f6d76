"""The Proxmox lease object: PVE's digest is the compare-and-set, the requests it costs
stay three per apply whatever the fleet's size, and two first takers end with one."""

from __future__ import annotations

import asyncio

import pytest

from sand.backends.fence import LeaseExpired
from sand.backends.lease import LeaseBusy, LeaseHolder
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.lease import ProxmoxLease, parse_record
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


def holder(name: str) -> LeaseHolder:
    return LeaseHolder.here(command=name)


async def test_the_lease_object_is_a_vm_config_never_started_with_no_disk(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    me = holder("apply")
    async with backend.lease(me, ttl=30):
        (obj,) = rig.lease_vms()
        config = rig.run(lambda: dict(obj.config))
        record = parse_record(config["description"])
        assert record is not None and record.held() and record.holder == me
    assert obj.name == "sand-lease-demo" and obj.status == "stopped"
    assert obj.vmid in rig.run(lambda: set(rig.pve.pools["sand"]))  # where the token may write
    assert not [k for k in config if k.startswith(("scsi", "virtio", "sata", "ide", "net"))]
    assert "sand-lease" in config["tags"] and "sand-backend-pve" in config["tags"]
    assert rig.vms() == []  # no VM of anybody's


async def test_a_write_with_a_stale_digest_is_refused(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    async with backend.lease(holder("first"), ttl=30):
        pass
    (obj,) = rig.lease_vms()
    late = ProxmoxLease(backend.ctx, holder("late"), 30)
    late.path = f"nodes/pve1/qemu/{obj.vmid}/config"
    stale = await backend.ctx.client.get(late.path)  # read ...
    async with rig.make_backend().lease(holder("meanwhile"), ttl=30):
        # ... another taker writes in between: PVE refuses the write the read allowed.
        record = parse_record(stale["description"])
        assert record is not None
        with pytest.raises(LeaseBusy):
            await late._write(stale, record.taken_by(late.holder, 30, 0.0), digest=True)
        current = parse_record(rig.run(lambda: rig.pve.vm(obj.vmid).config["description"]))
        assert current is not None and current.holder.command == "meanwhile"


@pytest.mark.parametrize("fleet", [1, 12])
async def test_an_apply_spends_three_requests_on_the_lease_whatever_the_fleet(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, fleet: int
) -> None:
    desired = rig.desired([{"name": f"vm-{i}"} for i in range(fleet)])
    async with backend.lease(holder("first"), ttl=30):
        for vm in desired:
            await backend.mark_converged(vm, await backend.create(vm, journal))
    (obj,) = rig.lease_vms()
    lease_path = f"/nodes/pve1/qemu/{obj.vmid}/config"
    run = rig.make_backend()
    rig.clear_log()
    seen = await run.observe(desired)  # the one listing also shows the lease's generation
    assert len(rig.log) == 1
    current = {o.name: o for o in seen.managed()}
    async with run.lease(holder("next"), ttl=30) as grant:
        assert grant.fresh
        for vm in desired:  # the apply's own work: a write to every VM
            await run.mark_converged(vm, current[vm.name])
    assert rig.count("PUT") == fleet + 2
    spent = [str(r) for r in rig.log if r.path == lease_path]
    assert spent == [
        f"GET {lease_path} -> 200",
        f"PUT {lease_path} -> 200",
        f"PUT {lease_path} -> 200",
    ]
    await run.close()


async def test_two_first_takers_at_once_end_with_one_lease_object(rig: FakePveRig) -> None:
    order: list[str] = []

    async def take(name: str) -> None:
        backend = rig.make_backend()
        try:
            async with backend.lease(holder(name), ttl=30, wait=20):
                order.append(f"+{name}")
                await asyncio.sleep(0.3)
                order.append(f"-{name}")
        finally:
            await backend.close()

    await asyncio.gather(take("a"), take("b"))
    assert len(rig.lease_vms()) == 1
    # Held one after the other, never both at once.
    assert order in (["+a", "-a", "+b", "-b"], ["+b", "-b", "+a", "-a"])


async def test_a_listing_that_hides_the_lease_object_never_makes_a_second(
    rig: FakePveRig,
) -> None:
    """The lease's name is fixed: before one is made it is looked up on the nodes
    themselves, so two hosts never hold two different objects."""
    first = rig.make_backend()
    async with first.lease(holder("first"), ttl=30):
        pass
    await first.close()
    (obj,) = rig.lease_vms()
    rig.hide_from_listing(obj.vmid)
    a, b = rig.make_backend(), rig.make_backend()
    try:
        async with a.lease(holder("a"), ttl=30):
            with pytest.raises(LeaseBusy):  # the same object: held by a
                async with b.lease(holder("b"), ttl=30):
                    pass
    finally:
        await a.close()
        await b.close()
    assert [v.vmid for v in rig.lease_vms()] == [obj.vmid]
    record = parse_record(rig.run(lambda: rig.pve.vm(obj.vmid).config["description"]))
    assert record is not None and record.holder.command == "a"


async def test_past_its_deadline_a_holder_sends_no_request(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """Every API request passes the lease's fence: once the holder's own clock says the
    lease may have expired (here: its clock jumped, as after a pause), not a clone, a
    renewal nor a release reaches PVE, and the run stops naming the lease."""
    (vm,) = rig.desired([{"name": "n-1"}])
    await backend.observe([vm])
    fence = backend.ctx.client.fence
    with pytest.raises(LeaseExpired, match="lease on pve expired while this run was paused"):
        async with backend.lease(holder("paused"), ttl=30):
            clock = fence.monotonic
            fence.monotonic = lambda: clock() + 30
            rig.clear_log()
            await backend.create(vm, journal)
    assert rig.log == []
    assert rig.vms() == []
