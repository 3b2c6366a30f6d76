"""The Backend contract (``sand/backends/protocol.py``), asserted once for every kind.

Each test runs against fakepve, the limactl stand-in driven locally, the same
stand-in on a remote host over real SSH, and the in-memory backend the engine's own
tests use (``tests/memory_backend``) (the ``far`` fixture); the two tests whose lease
holder is another process run on the first three only. The MUST rules it
checks are the ones the protocol's docstrings state; a new backend kind is a new
rig in ``rigs.py`` and must pass all of them. What is asserted is read from the far
side (the fake API's VMs, the stand-in's instance directories), the journal file,
and the plan in the words ``sand plan --json`` prints.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sand.backends.abilities import ClaimsSpares, Sleeps, capabilities_of
from sand.backends.lease import LeaseBusy, LeaseHolder, grace
from sand.backends.protocol import Backend, RecoveryAction
from sand.desired import DesiredState
from sand.errors import SandError
from sand.observed import Observation, ObservedVM, Ownership
from sand.plan import make_plan
from sand.plan.render import plan_to_json
from sand.project import observe_all
from sand.state.journal import Journal
from tests.contract.conftest import PROCESS_KINDS, MakeBackend
from tests.contract.rigs import BOX, ContractRig
from tests.required import require


def plan_words(
    state: DesiredState, observations: Mapping[str, Observation], backends: Mapping[str, Backend]
) -> dict[str, Any]:
    """The plan as ``sand plan --json`` prints it (the one place that calls the planner)."""
    capabilities = {name: capabilities_of(b) for name, b in backends.items()}
    return plan_to_json(make_plan(state, observations, capabilities))


def actions(words: Mapping[str, Any]) -> dict[str, str]:
    return {c["vm"]: c["action"] for c in words["changes"]}


async def converge(backend: Backend, state: DesiredState, journal: Journal) -> list[ObservedVM]:
    """Create every desired VM and mark it converged, as apply does for a fresh fleet."""
    await backend.observe(state.vms)
    made = []
    for vm in state.vms:
        current = await backend.create(vm, journal)
        await backend.mark_converged(vm, current)
        made.append(current)
    return made


async def test_create_then_observe_then_mark_converged_plans_a_no_op(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    state = far.state([{"name": "vm1"}])
    (vm,) = state.vms
    backend = backend_of()
    empty = await backend.observe(state.vms)
    assert empty.unknown_reason is None and empty.managed() == []
    assert actions(plan_words(state, {BOX: empty}, {BOX: backend})) == {"vm1": "create"}

    made = await backend.create(vm, journal)
    assert (made.name, made.ownership, made.fingerprint) == ("vm1", Ownership.MANAGED, "")
    assert far.names() == ["vm1"]
    assert journal.pending() == []

    # A fresh run sees it: managed, under the identity create returned, not converged.
    later = backend_of()
    seen = await later.observe(state.vms)
    (ours,) = seen.managed()
    assert (ours.name, ours.identity, ours.fingerprint) == ("vm1", made.identity, "")
    assert actions(plan_words(state, {BOX: seen}, {BOX: later})) == {"vm1": "update"}

    await later.mark_converged(vm, ours)
    again = backend_of()
    seen = await again.observe(state.vms)
    (ours,) = seen.managed()
    assert ours.fingerprint == vm.fingerprint
    words = plan_words(state, {BOX: seen}, {BOX: again})
    assert actions(words) == {"vm1": "no-op"}
    assert words["summary"] == {
        "add": 0,
        "change": 0,
        "destroy": 0,
        "finish": 0,
        "has_changes": False,
    }
    assert far.names() == ["vm1"]


async def test_a_delete_removes_the_vm_and_a_missing_vm_is_already_deleted(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    state = far.state([{"name": "vm1"}, {"name": "vm2"}])
    await converge(backend_of(), state, journal)
    backend = backend_of()
    current = {o.name: o for o in (await backend.observe([])).managed()}
    assert sorted(current) == ["vm1", "vm2"]

    await backend.delete(current["vm1"], journal)
    assert far.names() == ["vm2"]
    # The same observation again (the VM it names is gone now): nothing left to do.
    await backend.delete(current["vm1"], journal)
    # Removed behind sand's back between observe and delete.
    far.remove_by_hand(current["vm2"].identity)
    assert far.names() == []
    await backend.delete(current["vm2"], journal)

    assert journal.pending() == []
    after = await backend_of().observe([])
    assert after.unknown_reason is None and after.vms == ()


@pytest.mark.parametrize("whose", ["unmanaged", "other-project", "copied"])
async def test_a_vm_that_is_not_ours_is_refused_by_every_mutation(
    far: ContractRig, backend_of: MakeBackend, journal: Journal, tmp_path: Path, whose: str
) -> None:
    (mine,) = await converge(backend_of(), far.state([{"name": "vm1"}]), journal)
    if whose == "unmanaged":
        far.plant_unmanaged("stray")
        expected = Ownership.UNMANAGED
    elif whose == "other-project":
        theirs = far.state([{"name": "stray"}], project="other")
        await converge(backend_of(project="other"), theirs, Journal(tmp_path / "other.jsonl"))
        expected = Ownership.OTHER_PROJECT
    else:
        far.copy_by_hand(mine.identity, "stray")
        expected = Ownership.COPIED
    wanted = far.state([{"name": "vm1"}, {"name": "stray", "cpus": 3}])
    backend = backend_of()
    seen = await backend.observe(wanted.vms)
    (stray,) = [o for o in seen.vms if o.name == "stray"]
    assert stray.ownership is expected
    before = far.snapshot()

    want = wanted.vms[1]
    attempts: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("delete", lambda: backend.delete(stray, journal)),
        ("update", lambda: backend.update(want, stray, ["cpus"], journal)),
        ("rename", lambda: backend.rename(stray, "renamed", journal)),
        ("mark converged", lambda: backend.mark_converged(want, stray)),
    ]
    if isinstance(backend, Sleeps):
        attempts += [
            ("sleep", lambda: backend.sleep(stray, "stopped", journal)),
            ("wake", lambda: backend.wake(want, stray, journal)),
        ]
    if isinstance(backend, ClaimsSpares):
        pooled = dataclasses.replace(want, pool="agents")
        attempts.append(("claim", lambda: backend.claim(stray, pooled, journal)))
    for what, attempt in attempts:
        with pytest.raises(SandError, match="refusing"):
            await attempt()
        assert far.snapshot() == before, f"{what} changed a VM that is {expected}"
    assert journal.pending() == []
    # Left out of the manifest, it is never planned for deletion either.
    words = plan_words(far.state([{"name": "vm1"}]), {BOX: seen}, {BOX: backend})
    assert "stray" not in actions(words)


async def test_a_claim_takes_only_a_spare_of_the_vms_own_pool(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    """ClaimsSpares: a managed VM that is not a spare of the claiming VM's pool (a VM of
    the manifest, or another pool's spare) is refused, nothing changed, nothing journalled."""
    backend = backend_of()
    if not isinstance(backend, ClaimsSpares):
        pytest.skip("this backend keeps no warm pools")
    (mine,) = await converge(backend, far.state([{"name": "vm1"}]), journal)
    before = far.snapshot()
    claimer = dataclasses.replace(far.state([{"name": "agent-4"}]).vms[0], pool="agents")
    with pytest.raises(SandError, match="refusing to claim"):
        await backend.claim(mine, claimer, journal)
    assert far.snapshot() == before
    assert journal.pending() == []


async def test_sleep_then_wake_and_the_plan_sees_it_asleep_only_where_said(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    """Sleeps (idle VMs): a sleep leaves the VM not running (hibernated where the
    backend ``suspends``), a second one asks nothing; a wake runs it again; both
    journalled and finished. The sleep is marked on the VM itself (how, when, by whom),
    which any host's listing reads and the plan takes as asleep without this host's
    record; the wake takes the mark off."""
    from sand.plan.idle import Asleep

    state = far.state([{"name": "vm1"}])
    (vm,) = state.vms
    await converge(backend_of(), state, journal)
    backend = backend_of()
    assert isinstance(backend, Sleeps)
    how = "suspended" if backend.capabilities.suspends else "stopped"
    (current,) = (await backend.observe(state.vms)).managed()
    before = int(time.time())
    await backend.sleep(current, how, journal, by="person")
    seen = await backend_of().observe(state.vms)
    (asleep,) = seen.managed()
    assert asleep.power != "running"
    assert asleep.slept is not None and (asleep.slept.how, asleep.slept.by) == (how, "person")
    assert before <= asleep.slept.since <= time.time()
    await backend.sleep(asleep, how, journal)  # already asleep: nothing asked
    capabilities = {BOX: capabilities_of(backend)}
    words = plan_to_json(make_plan(state, {BOX: seen}, capabilities))  # no host record
    assert actions(words) == {"vm1": "no-op"}
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(asleep.slept.since))
    assert words["changes"][0]["asleep"] == {"how": how, "since": since, "by": "person"}
    record = {"vm1": Asleep(how, 1.0, "idle", asleep.identity)}
    words = plan_to_json(make_plan(state, {BOX: seen}, capabilities, asleep=record))
    assert words["changes"][0]["asleep"]["by"] == "person"  # the VM's word first

    await backend.wake(vm, asleep, journal)
    (awake,) = (await backend_of().observe(state.vms)).managed()
    assert awake.power == "running" and awake.slept is None
    assert journal.pending() == []


async def _cut_short(create: Awaitable[ObservedVM], reached: Callable[[], bool]) -> None:
    """Run ``create`` and cancel it the moment the far side shows ``reached`` (what a
    killed run leaves: the journal entry stays open, the backend's work half done)."""
    task = asyncio.ensure_future(create)
    deadline = time.monotonic() + 60
    while not reached():
        if task.done():
            raise AssertionError(f"the create ended before the crash point: {task.result()}")
        assert time.monotonic() < deadline, "the crash point was never reached"
        await asyncio.sleep(0.002)
    # Python 3.11's asyncio.wait_for (under asyncssh's run) can lose a cancellation that
    # meets a result in the same loop turn: cancel until the task has really stopped.
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.05)
    if not task.cancelled():
        raise AssertionError(f"the create was not cut short: {task.result()}")


@pytest.mark.parametrize("cut", ["before-the-marker", "after-the-marker"])
async def test_recovery_of_an_interrupted_create_removes_or_adopts_it(
    far: ContractRig, backend_of: MakeBackend, journal: Journal, cut: str
) -> None:
    # Lima's recovery waits for any limactl process on the host acting on the name: a
    # name of its own keeps other tests' instances (on this machine) out of it.
    name, other = f"cut-{secrets.token_hex(3)}", f"cut-{secrets.token_hex(3)}"
    # Two VMs of one image; the run is killed while it makes the first.
    state = far.state([{"name": name}, {"name": other}])
    vm = state.vms[0]
    if cut == "before-the-marker":
        far.slow_down_the_make()
        reached, expected = far.half_made, RecoveryAction.DELETE
    else:
        far.slow_down_the_start()
        reached, expected = far.marked, RecoveryAction.ADOPT
    crashed = far.backend()
    try:
        await crashed.observe(state.vms)
        await _cut_short(crashed.create(vm, journal), lambda: reached(name))
    finally:
        await crashed.close()
    (entry,) = [e for e in journal.pending() if e.op == "create"]
    assert entry.vm == name

    # The next run: decide (waiting for what the killed run left running), then act.
    backend = backend_of()
    decision = await backend.decide_recovery(entry, wait=True)
    assert decision.action is expected, decision.summary
    said = await backend.act_recovery(entry, decision)
    # Only the journal replay settles an entry; the backend never does.
    assert entry.id in {e.id for e in journal.pending()}

    seen = await backend_of().observe(state.vms)
    assert seen.unknown_reason is None, said
    planned = actions(plan_words(state, {BOX: seen}, {BOX: backend}))
    if expected is RecoveryAction.DELETE:
        assert far.names() == [] and seen.managed() == [], said
        assert planned == {name: "create", other: "create"}
    else:
        (ours,) = seen.managed()
        assert (ours.name, ours.lock, ours.fingerprint) == (name, None, "")
        assert far.names() == [name]
        assert planned == {name: "update", other: "create"}


async def test_a_backend_that_cannot_be_read_is_unknown_never_empty(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    await converge(backend_of(), far.state([{"name": "vm1"}, {"name": "old"}]), journal)
    # The manifest keeps vm1, drops old and adds new: a listing read as empty would
    # plan vm1 and new as creates and leave old unseen.
    state = far.state([{"name": "vm1"}, {"name": "new"}])
    before = far.snapshot()
    outages = far.outages()
    assert outages, "every rig can be made unreadable"
    for outage in outages:
        outage.start()
        try:
            backend = backend_of()
            try:
                direct: Observation | SandError = await backend.observe(state.vms)
            except SandError as exc:
                direct = exc  # the session records a raised SandError as unknown
            if isinstance(direct, Observation):
                assert direct.unknown_reason, f"{outage.label}: an untrusted listing read as known"
                assert direct.vms == (), outage.label
            observed = await observe_all({BOX: backend_of()}, state)
            obs = observed[BOX]
            assert obs.unknown_reason and obs.vms == (), outage.label
            words = plan_words(state, observed, {BOX: backend})
            assert actions(words) == {"vm1": "blocked", "new": "blocked"}, outage.label
            assert words["summary"]["has_changes"] is False
            assert list(words["unknown_backends"]) == [BOX]
            assert far.snapshot() == before, outage.label
        finally:
            if outage.end is not None:
                outage.end()
    assert journal.pending() == []


# --- the lease: one writer per project -------------------------------------------------


def _holder(command: str) -> LeaseHolder:
    return LeaseHolder.here(command=command)


async def test_a_second_taker_waits_then_is_told_who_holds_the_lease(
    far: ContractRig, backend_of: MakeBackend
) -> None:
    first, second = _holder("first"), _holder("second")
    before = far.snapshot()
    async with backend_of().lease(first, ttl=30):
        started = time.monotonic()
        waited: list[LeaseBusy] = []
        with pytest.raises(LeaseBusy) as busy:
            async with backend_of().lease(second, ttl=30, wait=1.5, on_wait=waited.append):
                raise AssertionError("a second holder was let in")
        assert time.monotonic() - started >= 1.4  # it waited before giving up
        assert len(waited) == 1  # and said so once
        said = str(busy.value)
        assert said.startswith(f"project demo is being applied by {first.host} (pid {first.pid}")
        assert " since 20" in said and BOX in said
        record = await backend_of().lease_record()
        assert record is not None and record.held() and record.holder == first
    # Released: the next taker is let in at once.
    async with backend_of().lease(second, ttl=30) as grant:
        record = await backend_of().lease_record()
        assert record is not None and record.holder == second
        assert grant.fresh  # this backend never observed: what it sees now is under the lease
    record = await backend_of().lease_record()
    assert record is not None and not record.held()
    # The lease is no VM: nothing a listing shows (or the far side holds as a VM) changed.
    assert far.names() == []
    seen = await backend_of().observe([])
    assert seen.vms == () and seen.requests == 1
    assert {k: v for k, v in far.snapshot().items() if k in before} == before


async def test_of_two_takers_at_once_exactly_one_wins(
    far: ContractRig, backend_of: MakeBackend
) -> None:
    async with backend_of().lease(_holder("earlier"), ttl=30):
        pass  # the lease's place exists; the race is for the lease itself
    outcomes: list[str] = []
    done = asyncio.Event()

    async def attempt(holder: LeaseHolder) -> None:
        try:
            async with backend_of().lease(holder, ttl=30, wait=0):
                outcomes.append("won")
                await asyncio.wait_for(done.wait(), 30)
        except LeaseBusy:
            outcomes.append("busy")
            done.set()

    await asyncio.gather(attempt(_holder("a")), attempt(_holder("b")))
    assert sorted(outcomes) == ["busy", "won"]


def _hold_elsewhere(
    far: ContractRig, tmp_path: Path, ttl: float, *, own_pids: bool
) -> subprocess.Popen[str]:
    """A process holding the lease; with ``own_pids`` in a pid namespace of its own,
    so its pids mean nothing here (as on another host)."""
    manifest = tmp_path / "hold.json"
    manifest.write_text(json.dumps(far.manifest([])))
    wrap = ["unshare", "--pid", "--kill-child", "--mount-proc"] if own_pids else []
    holder = subprocess.Popen(
        [*wrap, sys.executable, "-m", "tests.contract.hold_lease", str(manifest), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


# A holder in another process (killed, in a pid namespace of its own): the memory world
# lives in this process only. The lease's other rules (a busy lease names its holder, one
# of two takers wins, a grant's freshness) run on it too.
on_process_rigs = pytest.mark.parametrize("far", PROCESS_KINDS, indirect=True)


@pytest.mark.real_clock  # the lease expiry, once per backend
@on_process_rigs
async def test_the_lease_of_a_killed_holder_expires(
    far: ContractRig, backend_of: MakeBackend, tmp_path: Path
) -> None:
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare")
    ttl = 3.0
    holder = _hold_elsewhere(far, tmp_path, ttl, own_pids=True)
    try:
        with pytest.raises(LeaseBusy):
            async with backend_of().lease(_holder("too early"), ttl=ttl):
                pass
        holder.kill()  # SIGKILL: no release, no goodbye
        holder.wait(10)
        killed = time.monotonic()
        taker = backend_of()
        await taker.observe([])
        async with taker.lease(_holder("next"), ttl=ttl, wait=30) as grant:
            waited = time.monotonic() - killed
            # The dead holder's lease was in force when this backend observed.
            assert not grant.fresh
        assert waited <= ttl + grace(ttl) + 3.0
    finally:
        holder.kill()
        holder.wait(10)


@on_process_rigs
async def test_a_holder_killed_on_this_host_is_seen_gone_at_once(
    far: ContractRig, backend_of: MakeBackend, tmp_path: Path
) -> None:
    # What a person does after kill -9 of their own apply: run it again, at once.
    holder = _hold_elsewhere(far, tmp_path, 60.0, own_pids=False)
    holder.kill()
    holder.wait(10)
    async with backend_of().lease(_holder("again"), ttl=60, wait=0) as grant:
        assert grant.fresh  # this backend never observed


async def test_a_grant_is_fresh_only_when_nobody_wrote_since_the_observation(
    far: ContractRig, backend_of: MakeBackend
) -> None:
    async with backend_of().lease(_holder("setup"), ttl=30):
        pass
    quiet = backend_of()
    await quiet.observe([])
    async with quiet.lease(_holder("quiet"), ttl=30) as grant:
        assert grant.fresh
    late = backend_of()
    await late.observe([])
    async with backend_of().lease(_holder("meanwhile"), ttl=30):
        pass  # another applier came and went after `late` observed
    async with late.lease(_holder("late"), ttl=30) as grant:
        assert not grant.fresh
