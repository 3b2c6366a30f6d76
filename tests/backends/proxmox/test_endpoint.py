"""endpoint(): the guest's net0 address from the guest agent, waited for, never ambiguous."""

from __future__ import annotations

import asyncio

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.errors import ProxmoxError
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


async def test_the_address_on_net0s_mac(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev", "user": "alice"}])[0]
    made = await backend.create(vm, journal)
    rig.set_agent_ip(int(made.identity), "192.0.2.44")
    ep = await backend.endpoint(vm, made)
    assert (ep.host, ep.port, ep.user) == ("192.0.2.44", 22, "alice")
    assert ep.identity == str(rig.identity) and ep.host_key_policy == "none"


async def test_it_waits_for_the_agent_and_for_dhcp(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    vmid = int(made.identity)

    async def guest_boots() -> None:
        await asyncio.sleep(0.1)
        rig.set_agent_ip(vmid, None)  # the agent is up, DHCP not answered yet
        await asyncio.sleep(0.1)
        rig.set_agent_ip(vmid, "192.0.2.45")

    booting = asyncio.create_task(guest_boots())
    ep = await backend.endpoint(vm, made)
    await booting
    assert ep.host == "192.0.2.45"
    assert rig.count("GET", contains="/agent/network-get-interfaces") >= 3


async def test_an_agent_that_never_answers_is_a_bounded_clear_error(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    backend.ctx.timeouts.agent = 0.3
    with pytest.raises(ProxmoxError, match="QEMU guest agent is not running") as caught:
        await backend.endpoint(vm, made)
    assert f"VM {made.identity} (dev): no address from the guest agent after" in str(caught.value)
    assert caught.value.transient


async def test_another_nics_address_is_not_taken(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    rig.set_agent_ip(int(made.identity), "192.0.2.46", mac="02:00:00:00:00:99")
    backend.ctx.timeouts.agent = 0.2
    with pytest.raises(ProxmoxError, match="no IPv4 address on net0"):
        await backend.endpoint(vm, made)


async def test_an_address_two_vms_claim_is_refused(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    a, b = rig.desired([{"name": "a"}, {"name": "b"}])
    made_a, made_b = await backend.create(a, journal), await backend.create(b, journal)
    rig.set_agent_ip(int(made_a.identity), "192.0.2.50")
    rig.set_agent_ip(int(made_b.identity), "192.0.2.50")  # a stale lease, a conflict
    assert (await backend.endpoint(a, made_a)).host == "192.0.2.50"
    with pytest.raises(ProxmoxError, match=f"VM {made_a.identity} also claims"):
        await backend.endpoint(b, made_b)
    # Once the first VM is gone the address is free again.
    await backend.delete(made_a, journal)
    assert (await backend.endpoint(b, made_b)).host == "192.0.2.50"


async def test_observing_never_calls_the_agent(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    desired = rig.desired([{"name": "a"}, {"name": "b", "cpus": 4}])
    for vm in desired:
        made = await backend.create(vm, journal)
        rig.set_agent_ip(int(made.identity), "192.0.2.60")
    rig.clear_log()
    await backend.observe(desired)  # fingerprints differ: deep reads, still no agent
    assert rig.count(contains="/agent/") == 0 and rig.count() > 1
