"""Faults from fakepve: each is retried or ends in a clear error, and a re-run converges."""

from __future__ import annotations

import asyncio

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.errors import ProxmoxError
from sand.plan.model import Action
from sand.retrying import Backoff
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import apply, managed, plan, state_of
from tests.fakepve_rig.rig import FakePveRig

FLEET = [{"name": f"dev-{i}", "memory": "2GiB", "disk": "10GiB"} for i in range(3)]
LOCK_TIMEOUT = "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"


async def assert_converged(rig: FakePveRig, backend: ProxmoxBackend, entries: list) -> None:  # type: ignore[type-arg]
    """Re-planning finds nothing to do, and every entry has exactly one VM."""
    state = state_of(rig, entries)
    again = await plan(backend, state)
    assert not again.has_changes, [c.action for c in again.changes]
    for entry in entries:
        assert len(rig.vms_named(entry["name"])) == 1


async def test_a_flaky_network_is_retried_through(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    backend.ctx.client.retry = Backoff(attempts=12, initial=0.005, cap=0.02)
    rig.run(rig.pve.flaky_network, drop_rate=0.2)
    rig.run(rig.pve._random.seed, 1234)
    _, result = await apply(backend, state_of(rig, FLEET), journal)
    assert result.ok, result.failures()
    assert any(r.status == 0 for r in rig.log)  # connections were really dropped
    await assert_converged(rig, backend, FLEET)
    await backend.close()


async def test_hanging_requests_time_out_and_are_retried(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    backend.ctx.client.http_timeout = 0.3
    backend.ctx.client.retry = Backoff(attempts=10, initial=0.005, cap=0.02)
    rig.run(rig.pve.flaky_network, hang_rate=0.2, hang_secs=1)
    rig.run(rig.pve._random.seed, 99)
    entries = FLEET[:2]
    _, result = await apply(backend, state_of(rig, entries), journal)
    assert result.ok, result.failures()
    rig.clear_faults()
    for _ in range(40):  # requests really hung (they are answered, to nobody, a second later)
        if any(r.took >= 1.0 for r in rig.log):
            break
        await asyncio.sleep(0.05)
    assert any(r.took >= 1.0 for r in rig.log)
    await assert_converged(rig, backend, entries)
    await backend.close()


@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_a_slow_network_and_slow_tasks_are_polled(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    rig.run(rig.pve.slow_network, 0.02)
    rig.set_task_secs("qmclone", 0.4)
    entries = FLEET[:1]
    _, result = await apply(backend, state_of(rig, entries), journal)
    assert result.ok, result.failures()
    polls = rig.requests("GET", contains="/tasks/")
    clone_polls = [r for r in polls if ":qmclone:" in r.path]
    assert len(clone_polls) >= 3  # the clone ran in the background and was polled to its end
    await assert_converged(rig, backend, entries)
    await backend.close()


async def test_5xx_on_writes_are_retried(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("PUT", "/config", 500, "proxy loop detected", times=2)
    rig.fail("GET", "/cluster/nextid", 503, "Service Unavailable", times=1)
    _, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    assert result.ok, result.failures()
    await assert_converged(rig, backend, FLEET[:1])


async def test_a_clone_storage_lock_timeout_is_retried(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("POST", "/clone", 500, LOCK_TIMEOUT, times=2)  # refused before the worker
    rig.task_failures("qmclone", "*", LOCK_TIMEOUT)  # then the worker times out once
    vm = rig.desired(FLEET[:1])[0]
    made = await backend.create(vm, journal)
    assert rig.count("POST", contains="/clone") == 4
    assert len(rig.vms_named(vm.name)) == 1 and made.ownership.value == "managed"
    assert journal.pending() == []


async def test_a_lasting_lock_timeout_is_a_clear_transient_error_then_converges(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("POST", "/clone", 500, LOCK_TIMEOUT)
    _, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    (failure,) = result.failures()
    assert failure.error.startswith(
        "proxmox pve: clone of template 9000 to VM 100: POST /nodes/pve1/qemu/9000/clone: 500"
    )
    assert "got timeout" in failure.error and "gave up after 4 attempts" in failure.error
    assert rig.vms_named("dev-0") == []
    rig.clear_faults()
    _, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    assert result.ok and journal.pending() == []
    await assert_converged(rig, backend, FLEET[:1])


async def test_a_failed_start_task_names_its_log_and_a_rerun_converges(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.fail("POST", "/status/start", error="qemu_exited_code", times=1)
    _, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    (failure,) = result.failures()
    assert "start of VM 100 failed: QEMU exited with code 1" in failure.error
    assert "last task log lines:" in failure.error and "TASK ERROR" in failure.error
    assert len(journal.pending()) == 1  # configured: the next run adopts it
    second, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    assert result.ok, result.failures()
    assert [c.action for c in second.changes] == [Action.UPDATE]  # started, not re-created
    assert rig.vm(100) is not None and rig.vm(100).status == "running"  # type: ignore[union-attr]
    await assert_converged(rig, backend, FLEET[:1])


async def test_a_clone_that_runs_out_of_space_fails_cleanly(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.run(rig.pve.storages["local-lvm"].__setitem__, "avail", 1 << 30)  # 1 GiB, template 4
    vm = rig.desired(FLEET[:1])[0]
    with pytest.raises(ProxmoxError) as caught:
        await backend.create(vm, journal)
    message = str(caught.value)
    assert "clone of template 9000 to VM 100 failed" in message
    assert "No space left on device" in message and not caught.value.transient
    assert rig.count("POST", contains="/clone") == 1  # a definite failure is not retried
    assert rig.vms_named("dev-0") == [] and journal.pending() == []


async def test_task_warnings_succeed_and_are_surfaced(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.task_warnings("qmstart", "*", "iothread is only valid with virtio disk or virtio-scsi")
    vm = rig.desired(FLEET[:1])[0]
    made = await backend.create(vm, journal)
    assert made.power == "running"
    (warning,) = backend.warnings
    assert warning.startswith("start of VM 100: WARN: iothread is only valid")


async def test_a_locked_vm_is_left_alone_until_unlocked(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    entries = [{"name": "dev-0", "memory": "2GiB"}]
    rig.seed_managed(rig.desired(entries)[0], 100, lock="backup")
    entries = [{"name": "dev-0", "memory": "4GiB"}]
    first, result = await apply(backend, state_of(rig, entries), journal)
    assert [c.action for c in first.changes] == [Action.BLOCKED]
    assert "lock=backup" in first.changes[0].reasons[0]
    current = managed((await backend.observe(rig.desired(entries))).vms)["dev-0"]
    with pytest.raises(ProxmoxError, match=r"refusing to change VM 100 .*locked \(backup\)"):
        await backend.update(rig.desired(entries)[0], current, ["memory"], journal)
    assert str(rig.vm(100).config["memory"]) == "2048"  # type: ignore[union-attr]
    rig.run(rig.pve.unlock, 100)
    _, result = await apply(backend, state_of(rig, entries), journal)
    assert result.ok
    await assert_converged(rig, backend, entries)


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_a_busy_config_lock_is_waited_out(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    backend.ctx.client.retry = Backoff(attempts=10, initial=0.02, cap=0.1)
    entries = [{"name": "dev-0", "memory": "2GiB"}]
    rig.seed_managed(rig.desired(entries)[0], 100, status="stopped", config={})
    entries = [{"name": "dev-0", "memory": "4GiB", "state": "stopped"}]
    rig.call(rig.pve.hold_config_lock(100, 30))  # another task, 0.3 s real
    _, result = await apply(backend, state_of(rig, entries), journal)
    assert result.ok, result.failures()
    assert any(r.status == 500 for r in rig.requests("PUT", contains="/config"))
    await assert_converged(rig, backend, entries)
    await backend.close()


async def test_lost_quorum_is_a_clear_error_and_regained_quorum_converges(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    rig.run(rig.pve.lose_quorum)
    first, result = await apply(backend, state_of(rig, FLEET[:2]), journal)
    assert {c.action for c in first.changes} == {Action.CREATE}  # the listing still works
    assert len(result.failures()) == 2
    assert all("no quorum" in f.error for f in result.failures())
    assert rig.vms() == []
    rig.run(rig.pve.regain_quorum)
    _, result = await apply(backend, state_of(rig, FLEET[:2]), journal)
    assert result.ok and journal.pending() == []
    await assert_converged(rig, backend, FLEET[:2])


async def test_403_is_never_retried_and_shows_the_reason(rig: FakePveRig, journal: Journal) -> None:
    token = rig.add_token("sand@pve!narrow", acl="none")
    rig.run(rig.grant_sand_privileges, "sand@pve!narrow", without=["VM.PowerMgmt"])
    backend = rig.make_backend(token_file=str(token))
    vm = rig.desired(FLEET[:1])[0]
    with pytest.raises(ProxmoxError) as caught:
        await backend.create(vm, journal)
    assert str(caught.value) == (
        "proxmox pve: start of VM 100: POST /nodes/pve1/qemu/100/status/start: 403 Forbidden: "
        "Permission check failed (/vms/100, VM.PowerMgmt) (the token lacks this privilege: "
        "run `sand doctor`)"
    )
    assert rig.count("POST", contains="/status/start") == 1
    await backend.close()


HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x9b2J\rApply complete! Resources: 1 added."


async def test_a_task_log_quoting_the_guest_side_is_shown_inert(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    # Task logs repeat what qemu, the guest agent or a hook script wrote.
    rig.task_failures("qmstart", "*", f"guest says {HOSTILE}")
    _, result = await apply(backend, state_of(rig, FLEET[:1]), journal)
    (failure,) = result.failures()
    assert "last task log lines:" in failure.error and "guest says" in failure.error
    for text in (failure.error, str(failure)):
        assert not any(c in text for c in "\x1b\x07\x9b\r"), repr(text)
        assert "cHduZWQ" not in text and "owned" not in text
    assert not [ln for ln in failure.error.splitlines() if ln.startswith("Apply complete!")]
    rig.clear_faults()

    rig.task_warnings("qmstart", "*", f"warned {HOSTILE}")
    vm = rig.desired([{"name": "dev-9", "memory": "2GiB", "disk": "10GiB"}])[0]
    await backend.create(vm, journal)
    (warning,) = backend.warnings
    assert warning.startswith("start of VM ") and "warned" in warning
    assert not any(c in warning for c in "\x1b\x07\x9b\r\n"), repr(warning)
