"""One answer to "another applier wrote since the plan": a plan a person approved is
not run when it no longer does the same; a run nobody confirms goes on with the plan
made again under the lease. Two appliers of one project, on two hosts (two state
directories): the second writes while the first waits for its yes.

Both answers are the apply run's own: they are checked on the in-memory backend (two
sessions on one world). The first is also checked against fakepve with a real
``sand apply`` as the other applier, so a real far side's lease says "not fresh" too."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sand.apply.run import SUPERSEDED, ApplyRun, QuietView, RunEnd, Steering
from sand.plan.model import Plan
from sand.project import open_session
from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig
from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World


class AnotherApplierFirst:
    """Approves after another host applied the same project (``elsewhere``)."""

    def __init__(self, elsewhere: Callable[[], Awaitable[None]], person: bool) -> None:
        self.elsewhere, self._person = elsewhere, person
        self.asked: list[Plan] = []

    @property
    def person(self) -> bool:
        return self._person

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        self.asked.append(plan)
        await self.elsewhere()
        return True


class Replans(QuietView):
    def __init__(self) -> None:
        super().__init__()
        self.replans: list[tuple[Plan, Plan]] = []

    def replanned(self, approved: Plan, now: Plan) -> None:
        self.replans.append((approved, now))


def refused_as_superseded(end: RunEnd, approver: AnotherApplierFirst, view: Replans) -> None:
    assert [c.verb for c in approver.asked[0].changes] == ["create"]
    assert end.outcome is None and end.refusal is not None
    assert str(end.refusal) == SUPERSEDED
    assert view.replans == []  # nothing shown as if it would run


# --- fakepve, the other applier a real `sand apply` ------------------------------------


def apply_here(sand: Sand, approver: AnotherApplierFirst, view: Replans) -> RunEnd:
    async def run() -> RunEnd:
        session = open_session(sand.manifest, lock=True)
        try:
            return await ApplyRun(session, approver, view).run()
        finally:
            await session.close()

    return asyncio.run(run())


def clones(rig: FakePveRig) -> int:
    return len([r for r in rig.log if r.method == "POST" and r.path.endswith("/clone")])


@pytest.fixture
def sand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sand:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))  # this host's
    return Sand(tmp_path)


def test_a_plan_a_person_approved_does_not_run_once_another_applier_changed_the_vms(
    sand: Sand, fakepve_server, tmp_path: Path
) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}]))

    async def elsewhere() -> None:
        env = {"SAND_STATE_DIR": str(tmp_path / "elsewhere")}
        other = await asyncio.to_thread(sand.run, "apply", "--auto-approve", env=env)
        assert other.returncode == 0, other.stderr

    approver, view = AnotherApplierFirst(elsewhere, person=True), Replans()

    end = apply_here(sand, approver, view)

    refused_as_superseded(end, approver, view)
    assert [vm.name for vm in rig.vms()] == ["web-1"]
    assert clones(rig) == 1  # the other applier's: this one changed nothing


# --- the in-memory backend: two sessions on one world ----------------------------------


@contextlib.contextmanager
def state_dir(path: Path) -> Iterator[None]:
    """Another host's state directory (its journal, its records) for the body."""
    saved = os.environ["SAND_STATE_DIR"]
    os.environ["SAND_STATE_DIR"] = str(path)
    try:
        yield
    finally:
        os.environ["SAND_STATE_DIR"] = saved


def another_applier(fleet: Fleet, path: Path, person: bool, *targets: str) -> AnotherApplierFirst:
    async def elsewhere() -> None:
        with state_dir(path):
            other = await fleet.apply_async(steering=Steering(targets=targets))
        assert other.outcome is not None and other.outcome.converged

    return AnotherApplierFirst(elsewhere, person)


def creates(world: World) -> list[str]:
    return [name for step, name in world.log if step == "create"]


def test_in_memory_a_plan_a_person_approved_does_not_run_once_another_changed_the_vms(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.write([{"name": "web-1"}])
    approver, view = another_applier(fleet, tmp_path / "elsewhere", True), Replans()

    end = fleet.apply(approver=approver, view=view)

    refused_as_superseded(end, approver, view)
    assert creates(fleet.worlds["box"]) == ["web-1"]  # the other applier's only


def test_a_run_nobody_confirms_goes_on_with_the_plan_made_under_the_lease(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.write([{"name": "web-1"}, {"name": "web-2"}])
    approver = another_applier(fleet, tmp_path / "elsewhere", False, "web-1")
    view = Replans()

    end = fleet.apply(approver=approver, view=view)

    assert end.refusal is None and end.outcome is not None and end.outcome.converged
    (approved, now), *_ = view.replans
    assert sorted(c.vm for c in approved.changes if c.acts) == ["web-1", "web-2"]
    assert [c.vm for c in now.changes if c.acts] == ["web-2"]
    world = fleet.worlds["box"]
    assert sorted(vm.name for vm in world.vms.values()) == ["web-1", "web-2"]
    assert creates(world) == ["web-1", "web-2"]  # each VM made once, web-1 by the other
