"""The pure fleet-plan benchmark still runs: its probe builds observed VMs and
capabilities the way the planner takes them, so a change to those shapes shows here
and not as a crash of `python3 bench/run.py` (as a new ObservedVM field once did)."""

from __future__ import annotations

from bench.core import fleet_plan


def test_the_fleet_plan_benchmark_runs_and_plans_a_converged_fleet_as_no_op():
    rows = fleet_plan()  # asserts, in each probe, that nothing is planned
    assert [label for label, _ in rows] == [
        "manifest→plan, N=10",
        "manifest→plan, N=100",
        "manifest→plan, N=1000",
    ]
