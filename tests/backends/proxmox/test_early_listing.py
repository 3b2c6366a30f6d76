"""``sand plan`` sends its Proxmox listing as soon as the manifest is read, and builds
the desired state while PVE answers (``open_session(send_listings=True)``); the plan
then takes that answer as its one listing, failures and retries included."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from sand import asyncrun
from sand.plan import Plan
from sand.project import Session, open_session
from sand.survey.plan import compute_plan
from tests.fakepve_rig.rig import FakePveRig

LISTING = "/cluster/resources"


def _listings(rig: FakePveRig) -> int:
    return sum(1 for r in rig.log if r.method == "GET" and r.path == LISTING)


def _session(rig: FakePveRig, tmp_path: Path) -> Session:
    entries = [{"name": f"e-{i}"} for i in range(3)]
    for i, vm in enumerate(rig.desired(entries)):
        rig.seed_managed(vm, 300 + i)
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(yaml.safe_dump(rig.manifest(entries)))
    rig.clear_log()
    return open_session(manifest, lock=False, send_listings=True)


def _plan(session: Session) -> Plan:
    async def run() -> Plan:
        try:
            return await compute_plan(session)
        finally:
            await session.close()

    return asyncrun.run(run())


def test_the_listing_is_on_its_way_before_the_plan_asks_and_is_sent_once(
    rig: FakePveRig, tmp_path: Path
) -> None:
    session = _session(rig, tmp_path)
    deadline = time.monotonic() + 10  # a bound for a loaded machine, not a figure
    while _listings(rig) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _listings(rig) == 1  # sent while no plan ran yet
    plan = _plan(session)
    assert not plan.has_changes
    assert _listings(rig) == 1 and len(rig.log) == 1  # its answer was the plan's


def test_an_early_listing_that_fails_is_the_first_attempt_of_the_plans(
    rig: FakePveRig, tmp_path: Path
) -> None:
    rig.fail("GET", LISTING, 503, "busy", times=1)
    session = _session(rig, tmp_path)
    plan = _plan(session)
    assert not plan.has_changes
    assert _listings(rig) == 2  # the early one (503), then the retry: no third
