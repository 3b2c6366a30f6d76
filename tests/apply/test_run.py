"""One answer to "another applier wrote since the plan": a plan a person approved is
not run when it no longer does the same; a run nobody confirms goes on with the plan
made again under the lease. Two appliers of one project, on two hosts (two state
directories), against fakepve: the second writes while the first waits for its yes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sand.apply.run import SUPERSEDED, ApplyRun, QuietView, RunEnd
from sand.plan.model import Plan
from sand.project import open_session
from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig


class AnotherApplierFirst:
    """Approves after another host applied the same project (``sand apply`` there)."""

    def __init__(self, sand: Sand, elsewhere: Path, person: bool, *targets: str) -> None:
        self.sand, self.elsewhere, self._person = sand, elsewhere, person
        self.targets = [f"--target={t}" for t in targets]
        self.asked: list[Plan] = []

    @property
    def person(self) -> bool:
        return self._person

    async def approve(self, plan: Plan, problem: str | None) -> bool:
        self.asked.append(plan)
        env = {"SAND_STATE_DIR": str(self.elsewhere)}
        other = await asyncio.to_thread(
            self.sand.run, "apply", "--auto-approve", *self.targets, env=env
        )
        assert other.returncode == 0, other.stderr
        return True


class Replans(QuietView):
    def __init__(self) -> None:
        super().__init__()
        self.replans: list[tuple[Plan, Plan]] = []

    def replanned(self, approved: Plan, now: Plan) -> None:
        self.replans.append((approved, now))


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
    approver = AnotherApplierFirst(sand, tmp_path / "elsewhere", True)
    view = Replans()

    end = apply_here(sand, approver, view)

    assert [c.verb for c in approver.asked[0].changes] == ["create"]
    assert end.outcome is None and end.refusal is not None
    assert str(end.refusal) == SUPERSEDED
    assert view.replans == []  # nothing shown as if it would run
    assert [vm.name for vm in rig.vms()] == ["web-1"]
    assert clones(rig) == 1  # the other applier's: this one changed nothing


def test_a_run_nobody_confirms_goes_on_with_the_plan_made_under_the_lease(
    sand: Sand, fakepve_server, tmp_path: Path
) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "web-2"}]))
    approver = AnotherApplierFirst(sand, tmp_path / "elsewhere", False, "web-1")
    view = Replans()

    end = apply_here(sand, approver, view)

    assert end.refusal is None and end.outcome is not None and end.outcome.converged
    (approved, now), *_ = view.replans
    assert sorted(c.vm for c in approved.changes if c.acts) == ["web-1", "web-2"]
    assert [c.vm for c in now.changes if c.acts] == ["web-2"]
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2"]
    assert clones(rig) == 2  # each VM made once, web-1 by the other applier
