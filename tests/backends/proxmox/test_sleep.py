"""Sleep and wake on Proxmox (``sand.backends.proxmox.sleep``) and the hibernation's
preflight, asserted on fakepve's state, its task log and its request log."""

from __future__ import annotations

from dataclasses import replace

from sand.backends.protocol import PreflightItem
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import managed
from tests.fakepve_rig.rig import FakePveRig


def last_task(rig: FakePveRig, vmid: int) -> tuple[str, str]:
    log = rig.run(lambda: list(rig.pve.tasklog))
    mine = [(t["type"], t.get("exitstatus", "")) for t in log if t["id"] == str(vmid)]
    return mine[-1]


async def test_suspend_hibernates_to_the_backends_storage_and_wake_resumes(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    rig.seed_managed(vm, 640)
    current = managed((await backend.observe([vm])).vms)["dev"]

    await backend.sleep(current, "suspended", journal)
    fake = rig.vm(640)
    assert fake is not None and (fake.status, fake.lock) == ("stopped", "suspended")
    assert str(fake.config["vmstate"]).startswith("local-lvm:vm-640-state-suspend-")
    assert last_task(rig, 640) == ("qmsuspend", "OK")
    asleep = managed((await backend.observe([vm])).vms)["dev"]
    assert (asleep.power, asleep.lock) == ("stopped", "suspended")
    # Asleep already: a second sleep asks PVE for nothing.
    rig.clear_log()
    await backend.sleep(asleep, "suspended", journal)
    assert rig.count("POST") == 0

    await backend.wake(vm, asleep, journal)
    fake = rig.vm(640)
    assert fake is not None and (fake.status, fake.lock) == ("running", None)
    assert "vmstate" not in fake.config and last_task(rig, 640) == ("qmresume", "OK")
    assert [str(r) for r in rig.requests("POST")] == [
        "POST /nodes/pve1/qemu/640/status/resume -> 200"
    ]
    assert not journal.pending()  # each journalled and finished


async def test_stop_shuts_down_and_wake_starts(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    rig.seed_managed(vm, 641)
    current = managed((await backend.observe([vm])).vms)["dev"]
    await backend.sleep(current, "stopped", journal)
    fake = rig.vm(641)
    assert fake is not None and (fake.status, fake.lock) == ("stopped", None)
    assert last_task(rig, 641) == ("qmshutdown", "OK")
    stopped = managed((await backend.observe([vm])).vms)["dev"]
    await backend.wake(vm, stopped, journal)
    assert rig.vm(641).status == "running"  # type: ignore[union-attr]
    assert last_task(rig, 641) == ("qmstart", "OK")


async def test_a_vm_that_is_not_ours_is_never_put_to_sleep(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    import pytest

    from sand.backends.proxmox.errors import ProxmoxError

    vm = rig.desired([{"name": "dev"}])[0]
    rig.seed_managed(vm, 642)
    rig.seed_vm(644, "dev", status="running")  # a person's namesake, no marker
    current = managed((await backend.observe([vm])).vms)["dev"]
    for stale in (
        replace(current, identity="644"),  # sand's observation, pointed at the person's VM
        replace(current, marker=replace(current.marker, incarnation="a-later-vm")),  # type: ignore[type-var]
    ):
        with pytest.raises(ProxmoxError, match="refusing to put to sleep"):
            await backend.sleep(stale, "suspended", journal)
    assert [rig.vm(v).status for v in (642, 644)] == ["running", "running"]  # type: ignore[union-attr]
    assert rig.count("POST") == 0


async def test_preflight_blocks_a_hibernation_the_state_storage_cannot_take(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev", "memory": "8GiB"}])[0]
    rig.seed_managed(vm, 643)
    current = managed((await backend.observe([vm])).vms)["dev"]
    item = PreflightItem(vm, "update", ("power",), current, sleep="suspended")
    assert (await backend.preflight([item])).problems == ()
    store = rig.run(lambda: rig.pve.storages["local-lvm"])
    rig.run(store.__setitem__, "active", 0)
    problems = (await backend.preflight([item])).problems
    assert [(p.field, p.on_backend) for p in problems] == [("storage", True)]
    assert "cannot hibernate the idle VM: storage 'local-lvm' is not active" in problems[0].message
    # A stop needs no state volume: not checked.
    stop = PreflightItem(vm, "update", ("power",), current, sleep="stopped")
    assert (await backend.preflight([stop])).problems == ()
