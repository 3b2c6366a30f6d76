"""recover(): what a crashed run left in the journal is settled, never duplicated or orphaned."""

from __future__ import annotations

import asyncio

import pytest

from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.backend import ProxmoxVEBackend
from sand.backends.proxmox.errors import ProxmoxError
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import apply, plan, state_of
from tests.fakepve_rig.rig import FakePveRig

ENTRY = [{"name": "dev", "disk": "10GiB"}]


async def _crash_during_clone(rig: FakePveRig, journal: Journal) -> None:
    """Start a create and kill it while PVE's clone task runs (it goes on without us)."""
    backend = rig.make_backend()
    task = asyncio.create_task(backend.create(rig.desired(ENTRY)[0], journal))
    for _ in range(200):
        if rig.run(lambda: any(v.lock == "clone" for v in rig.pve.vms)):
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await backend.close()


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_a_create_killed_mid_clone_is_removed(rig: FakePveRig, journal: Journal) -> None:
    rig.set_task_secs("qmclone", 30)
    await _crash_during_clone(rig, journal)
    (entry,) = journal.pending()
    assert entry["op"] == "create" and entry["steps"] == []
    assert rig.vm(100) is not None and rig.vm(100).lock == "clone"  # type: ignore[union-attr]

    backend = rig.make_backend()  # the next run
    said = await backend.recover(entry, journal)

    assert "deleted" in said and "VM 100" in said
    assert rig.vm(100) is None and journal.pending() == []
    _, result = await apply(backend, state_of(rig, ENTRY), journal)
    assert result.ok and len(rig.vms_named("dev")) == 1
    await backend.close()


async def test_a_create_cut_off_after_configuration_is_adopted(
    rig: FakePveRig, backend: ProxmoxVEBackend, journal: Journal
) -> None:
    rig.fail("PUT", "/resize", 500, "internal error - hints are not valid")
    with pytest.raises(ProxmoxError, match="resize of VM 100"):
        await backend.create(rig.desired(ENTRY)[0], journal)
    (entry,) = journal.pending()
    assert entry["steps"] == ["cloned", "configured", "failed"]
    rig.clear_faults()

    said = await backend.recover(entry, journal)

    assert "adopted" in said and rig.vm(100) is not None and journal.pending() == []
    state = state_of(rig, ENTRY)
    todo = await plan(backend, state)
    (change,) = todo.changes
    assert change.identity == "100" and {f.field for f in change.fields} == {"disk", "state"}
    _, result = await apply(backend, state, journal)
    assert result.ok
    assert not (await plan(backend, state)).has_changes
    assert [v.vmid for v in rig.vms()] == [100]


async def test_a_create_that_made_nothing_settles_as_nothing(
    rig: FakePveRig, backend: ProxmoxVEBackend, journal: Journal
) -> None:
    rig.fail("POST", "/clone", 503, "Service Unavailable")
    with pytest.raises(ProxmoxError):
        await backend.create(rig.desired(ENTRY)[0], journal)
    (entry,) = journal.pending()  # the answer never came: it may have been made
    said = await backend.recover(entry, journal)
    assert "does not exist" in said and journal.pending() == []


async def test_a_vmid_someone_else_took_is_left_alone(
    rig: FakePveRig, backend: ProxmoxVEBackend, journal: Journal
) -> None:
    entry = journal.begin("create", backend="pve", vm="dev", identity="100", node="pve1")
    rig.seed_vm(100, "dev")  # a human made VM 100, named alike, before we could
    said = await backend.recover(journal.pending()[0], journal)
    assert "left alone" in said and rig.vm(100) is not None
    assert entry.id not in {e["id"] for e in journal.pending()}


async def test_an_interrupted_delete_is_finished(
    rig: FakePveRig, backend: ProxmoxVEBackend, journal: Journal
) -> None:
    vm = rig.desired(ENTRY)[0]
    rig.seed_managed(vm, 100)
    rig.fail("DELETE", "/qemu/100", 503, "Service Unavailable")
    current = (await backend.observe([])).vms[0]
    with pytest.raises(ProxmoxError):
        await backend.delete(current, journal)
    (entry,) = journal.pending()
    assert entry["op"] == "delete"
    rig.clear_faults()
    said = await backend.recover(entry, journal)
    assert "finished" in said and rig.vm(100) is None and journal.pending() == []


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_the_engine_replays_the_journal_first(rig: FakePveRig, journal: Journal) -> None:
    rig.set_task_secs("qmclone", 30)
    await _crash_during_clone(rig, journal)
    half_made = rig.vm(100)
    backend = rig.make_backend()
    _, result = await apply(backend, state_of(rig, ENTRY), journal)
    assert result.ok and journal.pending() == []
    (dev,) = rig.vms_named("dev")
    assert dev is not half_made  # it went; its id was free again for the fresh clone
    assert mk.parse_tags(dev.config["tags"]).complete
    await backend.close()
