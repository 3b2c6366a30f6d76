"""What a change in place costs on Proxmox, request by request (fakepve's request log),
and what it still sees: a config changed since the plan, another VM at the id, a change
PVE refuses, a change waiting in PVE's pending section. On both profiles."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from sand.backends.lease import LeaseHolder
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.desired import DesiredVM
from sand.observed import ObservedVM
from sand.state.journal import Journal
from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig

PROFILES = [
    pytest.param(8, marks=pytest.mark.fakepve_rig(pve_version=8), id="pve8"),
    pytest.param(9, marks=pytest.mark.fakepve_rig(pve_version=9), id="pve9"),
]
pytestmark = pytest.mark.parametrize("profile", PROFILES)
# A running VM's memory: the plan's read of it, shutdown, one write, start.
ON_THE_VM = {
    "GET /nodes/pve1/qemu/{id}/pending": 1,  # the plan's own deep read, reused
    "POST /nodes/pve1/qemu/{id}/status/shutdown": 1,
    "PUT /nodes/pve1/qemu/{id}/config": 1,  # memory, converged marker, the read's digest
    "POST /nodes/pve1/qemu/{id}/status/start": 1,
    "GET /nodes/pve1/tasks/{upid}/status": 2,  # shutdown, start: ended at once
}


def _on(rig: FakePveRig, vmid: int) -> Counter[str]:
    """The requests about VM ``vmid`` (its paths, its tasks), by endpoint."""
    out: Counter[str] = Counter()
    for r in rig.log:
        if f"/qemu/{vmid}/" in r.path + "/" or f":{vmid}:" in r.path:
            path = re.sub(r"/qemu/\d+", "/qemu/{id}", r.path)
            out[f"{r.method} {re.sub(r'/tasks/[^/]+', '/tasks/{upid}', path)}"] += 1
    return out


@pytest.mark.parametrize("n", [1, 5])
def test_a_one_field_change_costs_six_requests_on_the_vm(
    fakepve_server: FakePveRig, tmp_path: Path, profile: int, n: int
) -> None:
    rig = fakepve_server
    sand = Sand(tmp_path)
    vms = [{"name": f"vm-{i}", "memory": "2GiB"} for i in range(n)]
    sand.write(rig.manifest(vms))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (target,) = rig.vms_named("vm-0")
    sand.write(rig.manifest([{**vms[0], "memory": "3GiB"}, *vms[1:]]))
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _on(rig, target.vmid) == Counter(ON_THE_VM)
    # The run's own cost besides (the listing, preflight, the lease) names no other VM.
    others = {vm.vmid for vm in rig.vms() if vm.vmid != target.vmid}
    assert not any(_on(rig, vmid) for vmid in others)
    after = rig.vm(target.vmid)
    assert after is not None and int(after.config["memory"]) == 3072
    assert after.pending == {} and after.status == "running"
    plan = sand.run("plan", "--detailed-exitcode")
    assert plan.returncode == 0 and "No changes." in plan.stdout, plan.stdout + plan.stderr


async def _planned(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> tuple[DesiredVM, ObservedVM, int]:
    """A converged VM of 2 GiB, then 3 GiB desired and the VM observed as a plan does."""
    (vm,) = rig.desired([{"name": "dev", "memory": "2GiB"}])
    await backend.create(vm, journal, converged=True)
    (want,) = rig.desired([{"name": "dev", "memory": "3GiB"}])
    (current,) = (await backend.observe([want])).managed()
    assert current.deep  # the fingerprint differs: the plan read its config
    return want, current, int(current.identity)


async def _update(
    backend: ProxmoxBackend, want: DesiredVM, current: ObservedVM, journal: Journal
) -> ObservedVM:
    """The memory change as ``sand apply`` makes it: under the lease, nothing after it."""
    async with backend.lease(LeaseHolder.here(command="test"), ttl=60.0):
        return await backend.update(want, current, ["memory"], journal, converged=True)


async def test_a_config_changed_since_the_plan_is_read_again_and_kept(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    want, current, vmid = await _planned(rig, backend, journal)
    rig.run(rig.vm(vmid).config.__setitem__, "onboot", 1)  # an operator's edit meanwhile
    rig.clear_log()
    made = await _update(backend, want, current, journal)
    puts = rig.requests("PUT", f"/nodes/pve1/qemu/{vmid}/config")
    assert [p.status for p in puts] == [500, 200]  # checksum mismatch, then written anew
    assert rig.count("GET", f"/nodes/pve1/qemu/{vmid}/config") == 1  # the fresh read
    after = rig.vm(vmid)
    assert after is not None and after.config["onboot"] == 1  # the edit kept
    assert int(after.config["memory"]) == 3072
    assert mk.parse_tags(after.config["tags"]).fingerprint == want.fingerprint
    assert made.marker is not None and made.marker.fingerprint == want.fingerprint
    assert journal.pending() == []


async def test_another_vm_at_the_id_since_the_plan_is_refused_and_left_unmarked(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    want, current, vmid = await _planned(rig, backend, journal)
    rig.destroy_by_hand(vmid)
    rig.seed_vm(vmid, "dev", status="stopped", memory_mib=1024, tags="someone")
    rig.clear_log()
    with pytest.raises(Exception, match=r"it is unmanaged|not ours|not the VM"):
        await _update(backend, want, current, journal)
    after = rig.vm(vmid)
    assert after is not None and after.config.get("tags") == "someone"
    assert int(after.config["memory"]) == 1024
    puts = rig.requests("PUT", f"/nodes/pve1/qemu/{vmid}/config")
    assert [p.status for p in puts if p.status == 200] == []


async def test_a_change_pve_refuses_writes_no_marker_and_is_planned_again(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    want, current, vmid = await _planned(rig, backend, journal)
    rig.fail("PUT", f"/nodes/pve1/qemu/{vmid}/config", 400, "Parameter verification failed.")
    with pytest.raises(Exception, match="Parameter verification failed"):
        await _update(backend, want, current, journal)
    rig.clear_faults()
    after = rig.vm(vmid)
    assert after is not None and int(after.config["memory"]) == 2048
    assert mk.parse_tags(after.config["tags"]).fingerprint != want.fingerprint
    (again,) = (await backend.observe([want])).managed()
    assert again.fingerprint != want.fingerprint and again.memory != want.memory


async def test_a_restart_change_is_written_stopped_so_nothing_waits_pending(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, profile: int
) -> None:
    """PVE keeps a running VM's CPU and memory changes pending while its tags apply at
    once: the marker goes only into a write that lands on the stopped VM."""
    want, current, vmid = await _planned(rig, backend, journal)
    rig.clear_log()
    await _update(backend, want, current, journal)
    order = [(r.method, r.path.rsplit("/", 1)[-1]) for r in rig.log if f"/{vmid}/" in r.path]
    assert order.index(("POST", "shutdown")) < order.index(("PUT", "config"))
    assert order.index(("PUT", "config")) < order.index(("POST", "start"))
    after_vm = rig.vm(vmid)
    assert after_vm is not None and after_vm.status == "running" and after_vm.pending == {}
    (after,) = (await backend.observe([want])).managed()
    assert after.fingerprint == want.fingerprint and after.memory == want.memory
