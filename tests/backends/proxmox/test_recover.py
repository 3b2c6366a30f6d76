"""Recovery: what a crashed run left in the journal is settled, never duplicated or orphaned.

``replay_journal`` decides each entry (``decide_recovery``), acts on it and settles it;
``backend.recover`` decides and acts without settling."""

from __future__ import annotations

import asyncio

import pytest

from sand.apply.recovery import replay_journal
from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.errors import ProxmoxError
from sand.observed import Marker, Ownership
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
    assert entry.op == "create" and entry.steps == ()
    assert rig.vm(100) is not None and rig.vm(100).lock == "clone"  # type: ignore[union-attr]

    backend = rig.make_backend()  # the next run
    (said,) = (await replay_journal(journal, {"pve": backend})).done

    assert "deleted half-made clone 100" in said
    assert rig.vm(100) is None and journal.pending() == []
    _, result = await apply(backend, state_of(rig, ENTRY), journal)
    assert result.ok and len(rig.vms_named("dev")) == 1
    await backend.close()


async def test_a_create_cut_off_after_configuration_is_adopted(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("PUT", "/resize", 500, "internal error - hints are not valid")
    with pytest.raises(ProxmoxError, match="resize of VM 100"):
        await backend.create(rig.desired(ENTRY)[0], journal)
    (entry,) = journal.pending()
    assert entry.steps == ("cloned", "configured", "failed")
    rig.clear_faults()

    said = await backend.recover(entry)
    assert "adopt" in said and rig.vm(100) is not None
    assert journal.pending() != []  # only the replay settles entries
    (said,) = (await replay_journal(journal, {"pve": backend})).done
    assert "adopt" in said and journal.pending() == []
    state = state_of(rig, ENTRY)
    todo = await plan(backend, state)
    (change,) = todo.changes
    assert change.identity == "100" and {f.field for f in change.fields} == {"disk", "state"}
    _, result = await apply(backend, state, journal)
    assert result.ok
    assert not (await plan(backend, state)).has_changes
    assert [v.vmid for v in rig.vms()] == [100]


async def test_a_create_that_made_nothing_settles_as_nothing(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("POST", "/clone", 503, "Service Unavailable")
    with pytest.raises(ProxmoxError):
        await backend.create(rig.desired(ENTRY)[0], journal)
    assert len(journal.pending()) == 1  # the answer never came: it may have been made
    (said,) = (await replay_journal(journal, {"pve": backend})).done
    assert "does not exist" in said and journal.pending() == []


async def test_a_vmid_someone_else_took_is_left_alone(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    entry = journal.begin("create", backend="pve", vm="dev", identity="100", node="pve1")
    rig.seed_vm(100, "dev")  # a human made VM 100, named alike, before we could
    (said,) = (await replay_journal(journal, {"pve": backend})).done
    assert "left alone" in said and rig.vm(100) is not None
    assert entry.id not in {e.id for e in journal.pending()}


async def test_an_interrupted_delete_is_finished(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired(ENTRY)[0]
    rig.seed_managed(vm, 100)
    rig.fail("DELETE", "/qemu/100", 503, "Service Unavailable")
    current = (await backend.observe([])).vms[0]
    with pytest.raises(ProxmoxError):
        await backend.delete(current, journal)
    (entry,) = journal.pending()
    assert entry.op == "delete"
    rig.clear_faults()
    (said,) = (await replay_journal(journal, {"pve": backend})).done
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


async def _cut_short_mid_task(rig: FakePveRig, journal: Journal, task_type: str) -> str:
    """Change memory of a running VM and kill the update while ``task_type`` runs in
    PVE; returns that task's journalled UPID."""
    vm = rig.desired(ENTRY)[0]
    rig.seed_managed(vm, 100)
    changed = rig.desired([{**ENTRY[0], "memory": "4GiB"}])[0]
    backend = rig.make_backend()
    current = (await backend.observe([changed])).vms[0]
    task = asyncio.create_task(backend.update(changed, current, ["memory"], journal))

    def started() -> list[str]:
        return [u for e in journal.pending() for u in e.tasks if f":{task_type}:" in u]

    for _ in range(400):
        if started():
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await backend.close()
    (upid,) = started()
    return upid


def _task(rig: FakePveRig, upid: str) -> dict[str, object]:
    return dict(rig.run(lambda: dict(rig.pve.tasks[upid])))


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_recovery_waits_for_the_power_task_the_killed_run_started(
    rig: FakePveRig, journal: Journal
) -> None:
    rig.set_task_secs("qmshutdown", 150)  # 1.5 s
    upid = await _cut_short_mid_task(rig, journal, "qmshutdown")
    assert _task(rig, upid)["status"] == "running"

    backend = rig.make_backend()  # the next run
    # A plan does not wait: it says what apply will wait for.
    (entry,) = journal.pending()
    decision = await backend.decide_recovery(entry, wait=False)
    assert decision.action.value == "wait" and "qmshutdown" in decision.summary
    assert _task(rig, upid)["status"] == "running"

    rig.clear_log()
    await replay_journal(journal, {"pve": backend})
    # Settled only once the shutdown had ended: the VM is seen as it really is.
    assert _task(rig, upid)["status"] == "stopped" and journal.pending() == []
    assert rig.vm(100).status == "stopped"  # type: ignore[union-attr]
    polled = rig.requests("GET", f"/nodes/pve1/tasks/{upid}/status")
    assert polled and polled[-1].at >= float(_task(rig, upid)["endtime"])
    state = state_of(rig, [{**ENTRY[0], "memory": "4GiB"}])
    _, result = await apply(backend, state, journal)
    assert result.ok
    fake = rig.vm(100)
    assert fake is not None and fake.status == "running" and int(fake.config["memory"]) == 4096
    assert not (await plan(backend, state)).has_changes
    await backend.close()


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_a_power_task_still_running_at_the_deadline_keeps_the_entry_open(
    rig: FakePveRig, journal: Journal
) -> None:
    rig.set_task_secs("qmshutdown", 100_000)
    await _cut_short_mid_task(rig, journal, "qmshutdown")
    backend = rig.make_backend()
    backend.ctx.timeouts.unlock = 0.3
    recovery = await replay_journal(journal, {"pve": backend})
    assert "still running" in recovery.failed["pve"] and len(journal.pending()) == 1
    await backend.close()


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_a_clone_killed_before_configuration_is_removed_though_its_template_bore_a_marker(
    rig: FakePveRig, journal: Journal
) -> None:
    # A template an operator made from one of sand's VMs keeps its tags, and PVE copies
    # them into every clone: until sand configures the clone they name the template.
    old = Marker("demo", "old", "9001", "0123456789abcdef", "", "x", backend="pve")
    rig.seed_vm(
        9001,
        "golden-from-sand",
        template=True,
        status="stopped",
        disk=4 << 30,
        tags=mk.join_tags(mk.marker_tags(old)),
        description=desc.render_block(old),
    )
    rig.set_task_secs("qmclone", 30)
    backend = rig.make_backend()
    vm = rig.desired([{**ENTRY[0], "image": "golden-from-sand"}])[0]
    task = asyncio.create_task(backend.create(vm, journal))
    for _ in range(200):
        if rig.run(lambda: any(v.lock == "clone" for v in rig.pve.vms)):
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    half_made = rig.vm(100)
    assert half_made is not None and "sand-9001-0123456789abcdef" in half_made.config["tags"]

    (said,) = (await replay_journal(journal, {"pve": backend})).done
    assert "deleted half-made clone 100" in said
    assert rig.vm(100) is None and rig.vm(9001) is not None and journal.pending() == []
    await backend.close()


async def test_an_interrupted_delete_of_a_vm_whose_tags_now_name_another_project_is_moot(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired(ENTRY)[0]
    rig.seed_managed(vm, 100)
    rig.fail("DELETE", "/qemu/100", 503, "Service Unavailable")
    current = (await backend.observe([])).vms[0]
    with pytest.raises(ProxmoxError):
        await backend.delete(current, journal)
    rig.clear_faults()
    fake = rig.vm(100)
    assert fake is not None
    retagged = mk.merge_tags(fake.config["tags"], Marker("other", "dev", "100", "", ""))
    rig.run(fake.config.__setitem__, "tags", retagged)  # someone else's claim now

    # Tags and description disagree: not believed ours (the observation agrees).
    seen = (await backend.observe([])).vms[0]
    assert seen.ownership is Ownership.OTHER_PROJECT
    (said,) = (await replay_journal(journal, {"pve": backend})).done
    assert "moot" in said and rig.vm(100) is not None and journal.pending() == []
