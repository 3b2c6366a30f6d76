"""Which Lima instances are sand's: per backend entry, per incarnation, and protection
an operator set. Assertions read the stand-in's instances and sidecars on disk."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sand.apply.recovery import replay_journal
from sand.backends.lima import LimaBackend, make_lima_backend, recover
from sand.backends.protocol import RecoveryAction
from sand.errors import BackendError
from sand.manifest.backends import LimaConfig
from sand.observed import Ownership
from sand.plan import Action, make_plan
from sand.state.journal import Journal
from tests.backends.lima.conftest import desired, one
from tests.limactl_standin import StandIn
from tests.required import require


def sidecar(standin: StandIn, name: str) -> dict[str, object]:
    data = json.loads((standin.instance_dir(name) / "sand-marker.json").read_text())
    assert isinstance(data, dict)
    return data


def other_backend(standin: StandIn, tmp_path: Path, name: str = "desk") -> LimaBackend:
    """A second backend entry of the same project on the same LIMA_HOME."""
    cfg = LimaConfig(type="lima", lima_home=str(standin.lima_home))
    b = make_lima_backend(name, cfg, project="demo", manifest_dir=tmp_path)
    assert isinstance(b, LimaBackend)
    return b


async def test_an_instance_another_backend_made_is_never_planned_or_touched(
    standin: StandIn, backend: LimaBackend, tmp_path: Path, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    await backend.create(vm, journal)
    assert sidecar(standin, "vm1")["backend"] == "laptop"
    desk = other_backend(standin, tmp_path)
    try:
        (seen,) = (await desk.observe([])).vms
        assert seen.ownership is Ownership.OTHER_BACKEND
        state = desired()
        plan = make_plan(
            replace(state, vms=()), {"desk": await desk.observe([])}, {"desk": desk.capabilities}
        )
        assert plan.changes == ()  # nothing to prune: not desk's
        with pytest.raises(BackendError, match="other-backend"):
            await desk.delete(seen, journal)
        # The same name wanted on desk: blocked, never adopted.
        wanted = replace(state.vms[0], backend="desk")
        plan = make_plan(
            replace(state, vms=(wanted,)),
            {"desk": await desk.observe([wanted])},
            {"desk": desk.capabilities},
        )
        (change,) = plan.changes
        assert change.action is Action.BLOCKED
        assert "belongs to backend 'laptop'" in change.reasons[0]
    finally:
        await desk.close()
    assert standin.instances() == ["vm1"] and "delete" not in standin.commands()


async def test_a_sidecar_without_a_backend_name_is_adopted_and_named(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    await backend.create(vm, journal)
    path = standin.instance_dir("vm1") / "sand-marker.json"
    data = json.loads(path.read_text())
    del data["backend"]  # as an older sand wrote it
    path.write_text(json.dumps(data))
    (seen,) = (await backend.observe([vm])).vms
    assert seen.ownership is Ownership.MANAGED
    await backend.mark_converged(vm, seen)
    assert sidecar(standin, "vm1")["backend"] == "laptop"
    assert sidecar(standin, "vm1")["uid"] == data["uid"]  # the incarnation is kept


async def test_a_replayed_delete_spares_the_instance_made_since_under_that_name(
    standin: StandIn, make_backend, journal: Journal, tmp_path: Path
) -> None:
    vm = one()
    first = make_backend()
    await first.observe([vm])
    await first.create(vm, journal)
    old_uid = sidecar(standin, "vm1")["uid"]
    # Host A journals the delete, then dies; the delete goes through without it...
    entry = journal.begin("delete", backend="laptop", vm="vm1", identity="vm1", uid=old_uid)
    standin.run("delete", "--force", "vm1")
    # ...and host B (its own journal) makes vm1 again.
    other = make_backend()
    await other.observe([vm])
    await other.create(vm, Journal(tmp_path / "b.jsonl"))
    new_uid = sidecar(standin, "vm1")["uid"]
    assert new_uid != old_uid

    recovery = await replay_journal(journal, {"laptop": make_backend()})
    (decision,) = recovery.decisions
    assert decision.action is RecoveryAction.MOOT and entry.id not in journal.pending()
    assert standin.instances() == ["vm1"] and sidecar(standin, "vm1")["uid"] == new_uid

    # A half-deleted directory of the successor is not "finished" either.
    standin.instance_dir("vm1").joinpath("lima.yaml").unlink()
    journal.begin("delete", backend="laptop", vm="vm1", identity="vm1", uid=old_uid)
    recovery = await replay_journal(journal, {"laptop": make_backend()})
    assert recovery.decisions[0].action is RecoveryAction.MOOT
    assert standin.instance_dir("vm1").exists()


async def test_a_replayed_create_adopts_only_its_own_incarnation(
    standin: StandIn, backend: LimaBackend, journal: Journal, tmp_path: Path
) -> None:
    vm = one()
    await backend.observe([vm])
    await backend.create(vm, Journal(tmp_path / "other-host.jsonl"))
    journal.begin("create", backend="laptop", vm="vm1", identity="vm1", via="create", uid="x1")
    (entry,) = journal.pending()
    decision = await backend.decide_recovery(entry, wait=False)
    assert decision.action is RecoveryAction.MOOT and not decision.absent
    mine = journal.begin(
        "create",
        backend="laptop",
        vm="vm1",
        identity="vm1",
        via="create",
        uid=sidecar(standin, "vm1")["uid"],
    )
    (entry,) = [e for e in journal.pending() if e.id == mine.id]
    assert (await backend.decide_recovery(entry, wait=False)).action is RecoveryAction.ADOPT


async def test_protection_an_operator_set_is_never_lifted(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    made = await backend.create(vm, journal)
    await backend.mark_converged(vm, made)
    standin.run("protect", "vm1")  # by hand
    changed = one("  - name: vm1\n    cpus: 4\n")
    (seen,) = (await backend.observe([changed])).vms
    assert seen.protect and seen.operator_protected
    state = desired("  - name: vm1\n    cpus: 4\n")
    observed = {"laptop": await backend.observe(state.vms)}
    plan = make_plan(state, observed, {"laptop": backend.capabilities})
    (change,) = plan.changes
    assert [f.field for f in change.fields] == ["cpus"]
    assert any("protection was set outside sand" in w for w in plan.warnings)
    with pytest.raises(BackendError, match="set outside sand"):
        await backend.update(changed, seen, ["protect"], journal)
    await backend.update(changed, seen, ["cpus"], journal)
    assert (standin.instance_dir("vm1") / "protected").exists()


async def test_protection_sand_set_is_lifted_as_the_manifest_says(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one("  - name: vm1\n    protect: true\n")
    await backend.observe([vm])
    made = await backend.create(vm, journal)
    assert sidecar(standin, "vm1")["protect"] is True
    await backend.mark_converged(vm, made)
    state = desired("  - name: vm1\n    protect: false\n")
    (seen,) = (await backend.observe(state.vms)).vms
    assert seen.protect and not seen.operator_protected
    observed = {"laptop": await backend.observe(state.vms)}
    plan = make_plan(state, observed, {"laptop": backend.capabilities})
    (change,) = plan.changes
    assert [f.field for f in change.fields] == ["protect"]
    await backend.update(state.vms[0], seen, ["protect"], journal)
    assert not (standin.instance_dir("vm1") / "protected").exists()


@pytest.fixture
def fake_limactl() -> Iterator[Callable[..., None]]:
    """Starts processes that look like `limactl start vm1` (a Python script named
    limactl): as another user, or with another LIMA_HOME."""
    where = Path(tempfile.mkdtemp(prefix="sand-fake-limactl-"))
    where.chmod(0o755)
    script = where / "limactl"
    script.write_text("import time\ntime.sleep(300)\n")
    script.chmod(0o755)
    started: list[subprocess.Popen[bytes]] = []

    def start(lima_home: Path, user: str | None = None) -> None:
        gid = pwd.getpwnam(user).pw_gid if user else 0
        prefix = ["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups"]
        # The system's python: another user may not reach this one's (under /root).
        argv = [*(prefix if user else []), "/usr/bin/python3", str(script), "start", "vm1"]
        env = {**os.environ, "LIMA_HOME": str(lima_home)}
        started.append(subprocess.Popen(argv, env=env, cwd="/"))

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
    shutil.rmtree(where)


async def test_recovery_waits_only_for_limactl_of_this_user_and_this_lima_home(
    standin: StandIn, backend: LimaBackend, fake_limactl: Callable[..., None], tmp_path: Path
) -> None:
    require(os.geteuid() == 0, "starting a process as another user needs root")
    require(Path("/usr/bin/python3").exists(), "the system python3 (a process of nobody's)")
    other_home = tmp_path / "other-lima"
    other_home.mkdir()
    fake_limactl(standin.lima_home, user="nobody")  # another Lima user, same name
    fake_limactl(other_home)  # this user, another LIMA_HOME
    deadline = time.monotonic() + 10
    while len(_fakes()) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(_fakes()) == 2
    assert await recover.in_flight(backend.ctx, "vm1") == []
    fake_limactl(standin.lima_home)  # this user, this LIMA_HOME: the one to wait for
    while len(_fakes()) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    (busy,) = await recover.in_flight(backend.ctx, "vm1")
    assert busy.startswith("limactl start (pid ")


async def test_a_limactl_that_ended_after_ps_listed_it_is_not_waited_for(
    backend: LimaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another Lima home's short limactl (another sand, another test) can end between the
    process listing and the look at its environment: gone, it acts on nothing here.
    Before, such a process counted, and the plan said "wait for limactl create (pid N)"."""
    gone = _a_pid_that_ended()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ps = bin_dir / "ps"  # the listing as ps gave it an instant before the process ended
    ps.write_text(f"#!/bin/sh\necho '{gone} /usr/local/bin/limactl create --name=vm1 -'\n")
    ps.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert await recover.in_flight(backend.ctx, "vm1") == []


def _a_pid_that_ended() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _fakes() -> list[str]:
    ps = ["ps", "-ww", "-A", "-o", "args="]
    out = subprocess.run(ps, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "sand-fake-limactl-" in line]
