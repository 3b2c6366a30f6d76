"""Hibernation as qemu-server does it (tests/fakepve_rig/hibernation.py), and sand's
preflight of it: the state volume's real size (2 × RAM + 500 MiB) and the privileges
PVE checks (``VM.Config.Disk`` on the VM, ``Datastore.AllocateSpace`` on the storage).

First the layer over raw HTTP on both profiles, then sand's preflight through it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sand.backends.protocol import PreflightItem
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import managed
from tests.backends.proxmox.test_fidelity import Api
from tests.backends.proxmox.test_stored_forms import seeded
from tests.fakepve_rig.rig import FakePveRig

MIB = 1 << 20
SUSPEND = "nodes/pve1/qemu/100/status/suspend"


def _state_volumes(rig: FakePveRig) -> dict[str, Any]:
    volumes = rig.run(lambda: dict(rig.pve.storages["local-lvm"].get("volumes", {})))
    return {k: v for k, v in volumes.items() if "-state-" in k}


def _task(rig: FakePveRig, upid: str) -> dict[str, Any]:
    return rig.run(lambda: dict(rig.pve.tasks[upid]))


async def _hibernation(
    rig: FakePveRig, backend: ProxmoxBackend, vmid: int, memory: str
) -> PreflightItem:
    """The preflight item of a managed VM ``memory`` big that its idle policy hibernates."""
    vm = rig.desired([{"name": "dev", "memory": memory}])[0]
    rig.seed_managed(vm, vmid)
    current = managed((await backend.observe([vm])).vms)["dev"]
    return PreflightItem(vm, "update", ("power",), current, sleep="suspended")


def _wait_for(what: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("major", [8, 9])
def test_statestorage_needs_todisk_and_todisk_needs_config_disk(
    fakepve_factory: Any, major: int
) -> None:
    rig, api = seeded(fakepve_factory, major, "running")
    status, message = api.call("POST", SUSPEND, statestorage="local-lvm")
    assert (status, message.strip()) == (400, "Parameter verification failed.")
    assert rig.vm(100).lock is None
    # Given with todisk=0 the schema is met and the storage ignored: a pause.
    assert api.call("POST", SUSPEND, statestorage="local-lvm", todisk=0)[0] == 200
    assert (rig.vm(100).qmpstatus, rig.vm(100).lock) == ("paused", None)
    api.call("POST", "nodes/pve1/qemu/100/status/resume")
    rig.run(lambda: rig.pve.acl.__setitem__(rig.token_id, []))
    rig.run(rig.grant_sand_privileges, rig.token_id, without=["VM.Config.Disk"])
    status, message = api.call("POST", SUSPEND, todisk=1, statestorage="local-lvm")
    assert (status, message.strip()) == (403, "Permission check failed (/vms/100, VM.Config.Disk)")
    assert rig.vm(100).status == "running" and _state_volumes(rig) == {}


@pytest.mark.parametrize("major", [8, 9])
def test_the_state_is_twice_the_ram_and_500mib_and_a_plain_start_resumes(
    fakepve_factory: Any, major: int
) -> None:
    rig, api = seeded(fakepve_factory, major, "running", time_scale=0.01)
    rig.run(setattr, rig.pve, "savevm_secs", 1000)  # the save goes on until fast-forwarded
    status, upid = api.call("POST", SUSPEND, todisk=1, statestorage="local-lvm")
    assert status == 200
    _wait_for(lambda: rig.vm(100).lock == "suspending")
    (name, volume), = _state_volumes(rig).items()  # fmt: skip
    assert name.startswith("vm-100-state-suspend-") and volume["size"] == (2 * 2048 + 500) * MIB
    assert rig.vm(100).config["vmstate"] == f"local-lvm:{name}"
    rig.fast_forward()
    _wait_for(lambda: _task(rig, upid)["status"] == "stopped")
    assert _task(rig, upid)["exitstatus"] == "OK"
    assert (rig.vm(100).status, rig.vm(100).lock) == ("stopped", "suspended")
    # qemu-server's vm_start resumes it: the state loaded, its volume freed.
    assert api.call("POST", "nodes/pve1/qemu/100/status/start")[0] == 200
    _wait_for(lambda: rig.vm(100).status == "running")
    config = rig.vm(100).config
    assert "vmstate" not in config and "lock" not in config and "runningmachine" not in config
    assert rig.vm(100).lock is None and _state_volumes(rig) == {}


def test_a_state_the_storage_cannot_hold_or_a_failed_save(fakepve_server: FakePveRig) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="running", memory_mib=2048)
    store = rig.run(lambda: rig.pve.storages["local-lvm"])
    rig.run(store.__setitem__, "avail", 4 << 30)  # the RAM fits, twice the RAM does not
    upid = api.call("POST", SUSPEND, todisk=1)[1]  # no statestorage: the disks' storage
    task = _task(rig, upid)
    assert task["exitstatus"] == "unable to write to storage 'local-lvm': No space left on device"
    assert (rig.vm(100).status, rig.vm(100).lock) == ("running", None)
    assert "vmstate" not in rig.vm(100).config
    # A save that fails leaves the suspending lock, as PVE does to show something broke.
    rig.run(store.__setitem__, "avail", 64 << 30)
    rig.run(setattr, rig.pve, "savevm_failures", 1)
    upid = api.call("POST", SUSPEND, todisk=1)[1]
    assert "query-savevm failed" in _task(rig, upid)["exitstatus"]
    assert (rig.vm(100).status, rig.vm(100).lock) == ("running", "suspending")
    assert "vmstate" not in rig.vm(100).config and _state_volumes(rig) == {}


async def test_preflight_sizes_the_state_as_pve_does(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """2 GiB of RAM: 4596 MiB of state. A storage with 4 GiB free holds the RAM but not
    the state volume: blocked before the idle VM is touched, naming the size."""
    item = await _hibernation(rig, backend, 643, "2GiB")
    store = rig.run(lambda: rig.pve.storages["local-lvm"])
    rig.run(store.__setitem__, "avail", 5 << 30)
    assert (await backend.preflight([item])).problems == ()
    rig.run(store.__setitem__, "avail", 4 << 30)
    (problem,) = (await backend.preflight([item])).problems
    assert (problem.field, problem.on_backend) == ("storage", True)
    assert "has 4GiB free; the saved state needs 4596MiB" in problem.message


async def test_preflight_names_the_privileges_a_suspend_to_disk_takes(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    item = await _hibernation(rig, backend, 644, "1GiB")
    for lacking, said in (
        ("VM.Config.Disk", "the token lacks VM.Config.Disk on /pool/sand"),
        ("Datastore.AllocateSpace", "Datastore.AllocateSpace on /storage/local-lvm"),
    ):
        rig.run(lambda: rig.pve.acl.__setitem__(rig.token_id, []))
        rig.run(rig.grant_sand_privileges, rig.token_id, without=[lacking])
        (problem,) = (await backend.preflight([item])).problems
        assert said in problem.message, problem.message
    # A stop takes neither.
    stop = PreflightItem(item.vm, "update", ("power",), item.current, sleep="stopped")
    assert (await backend.preflight([stop])).problems == ()
