"""Fixtures of the three test rigs, registered once for the whole suite:
real guests (netns sshd, qemu), fakepve, and the limactl stand-in.

With ``SAND_RIG_REQUIRED`` set (``.ci/run`` sets it) no test may skip: a missing
prerequisite fails it (:mod:`tests.required`), and the hook below turns any other
skip into a failure too, so a CI run cannot pass by proving nothing."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.required import rig_required

# limactl refuses root, and so does its stand-in unless told otherwise; the suite runs
# as root, so every stand-in it starts (through any subprocess) is told.
os.environ["LIMACTL_STANDIN_ALLOW_ROOT"] = "1"
# sand's desired-state cache (sand.desired_cache) in a directory of the run's own, never
# the user's; its workers inherit it (the cache's files are replaced atomically).
os.environ.setdefault("SAND_CACHE_DIR", tempfile.mkdtemp(prefix="sand-test-cache-"))

pytest_plugins = [
    "tests.rig.fixtures",
    "tests.fakepve_rig.fixtures",
    "tests.limactl_standin.fixtures",
    "pytester",  # tests/test_required.py runs pytest inside pytest
]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and rig_required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped while SAND_RIG_REQUIRED is set: {reason}"


# Under pytest-xdist (``addopts`` runs ``-n 4 --dist loadgroup``) the tests that boot
# guests under TCG, the qemu ones and the real-Lima tier, all keep to one worker: one
# TCG guest at a time, as a serial run has it (two at once on two cores starved a
# clone's boot past its 300 s wait for an address), and the tier's guests, ports and
# Lima home are never shared by two workers.
BOOTS_UNDER_TCG = ("tcg", "real_lima")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(marker) for marker in BOOTS_UNDER_TCG):
            item.add_marker(pytest.mark.xdist_group("tcg"))


@pytest.fixture(autouse=True)
def sand_process_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``sand_process`` runs ``Sand.run`` as a subprocess (tests/cli/helpers);
    so do the e2e tests, whose guests outlast any one run."""
    if any(request.node.get_closest_marker(m) for m in ("sand_process", "e2e")):
        monkeypatch.setattr("tests.cli.helpers.PROCESS_MARKED", True)


@pytest.fixture(autouse=True)
def sand_time_scale_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``@pytest.mark.sand_time_scale(0.01)``: sand's patience with the world (a guest
    agent, a retry's backoff, an SSH or HTTP answer that never comes) passes that much
    faster in this test, in-process and in every ``sand`` it starts (sand/clock.py)."""
    marker = request.node.get_closest_marker("sand_time_scale")
    if marker is not None:
        monkeypatch.setenv("SAND_TIME_SCALE", str(marker.args[0]))
