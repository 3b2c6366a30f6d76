"""The benchmarks still run, every section to its end: ``bench/run.py --quick`` runs
each at a small size, so a change to the shapes a benchmark builds (a new ObservedVM
field, a renamed attribute) shows here and not as a crash halfway through
``python3 bench/run.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.fleet_cli import _run
from bench.run import SECTIONS

ROOT = Path(__file__).resolve().parents[1]


def test_bench_quick_runs_every_section_to_its_end():
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--before", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    for title, *_ in SECTIONS:
        assert f"## {title}" in done.stdout
    # The pure plan probe planned a converged fleet as no change (it asserts so).
    assert "manifest→plan, N=10 " in done.stdout
    # One table ends the run, every headline figure in it, beside its baseline, the
    # tree before (here HEAD: the same code, measured in the same run) and its goal.
    summary = done.stdout.split("## summary", 1)[1]
    for figure in (
        "sand --version",
        "sand validate (1 VM)",
        "sand plan, 1 converged VMs (no-op)",
        "its peak memory (max RSS)",
        "Proxmox cold create, N=2, disk grown",
        "s clones, ",
        "Lima cold create, N=4",
        "Proxmox one-field change, N=2: requests on the VM",
        "Proxmox N=5 creates: nextid retries",
        "Proxmox no-op plan, 5 VMs with egress policies: requests",
        "Proxmox egress change, N=2: requests on the VM",
        "generators: requests of an unchanged poll",
        "generators: label → VM claimed from a warm pool",
        "audit append, p99 of one event",
        "audit verify, ",
        "brokered git fetch of a new commit",
        "brokered GitHub API GET (curl)",
    ):
        assert figure in summary, summary
    assert "python -c pass" in summary and "floor" in summary and "ideal scheduler" in summary
    plan = next(line for line in summary.splitlines() if "sand plan, 1 converged" in line)
    assert plan.count("x)") == 2, plan  # against the floor and against before


def test_peak_memory_is_the_measured_process_own_not_the_bench_process():
    # The bench process holds much memory (a fake PVE with 1000 VMs); a command it
    # starts must not be charged with it.
    ballast = bytearray(300 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])
    _, code, maxrss_kib, _ = _run([sys.executable, "-c", "pass"], {}, ROOT)
    assert code == 0
    assert maxrss_kib < 100 * 1024, f"{maxrss_kib / 1024:.0f} MiB for python -c pass"
    del ballast


def test_a_command_is_run_by_the_measured_tree_own_sand(tmp_path):
    # `python -m sand` looks in the working directory first: run from this checkout,
    # the tree before (--before) was never the one measured.
    from bench.core import installed_env, run_in

    tree = tmp_path / "before"
    (tree / "sand").mkdir(parents=True)
    (tree / "sand" / "__init__.py").write_text("")
    (tree / "sand" / "__main__.py").write_text("raise SystemExit(7)\n")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_in(tree, [sys.executable, "-m", "sand", "--version"], installed_env(tree))
    assert failed.value.returncode == 7


def test_each_measured_tree_keeps_its_own_cache_across_its_runs(tmp_path):
    # One cache shared by this tree and the tree before: each run found the other
    # tree's reading of the manifest under another key, and "checked again unchanged"
    # measured a first check on both sides.
    from bench.core import _medians_wall_cpu_ms

    trees = []
    for name in ("now", "before"):
        tree = tmp_path / name
        (tree / "sand").mkdir(parents=True)
        (tree / "sand" / "__init__.py").write_text("")
        (tree / "sand" / "__main__.py").write_text(
            "import os\n"
            f"with open({str(tmp_path / name)!r} + '.log', 'a') as log:\n"
            "    print(os.environ['SAND_CACHE_DIR'], file=log)\n"
        )
        trees.append(tree)
    _medians_wall_cpu_ms([sys.executable, "-m", "sand"], 2, trees)
    now, before = (set((tmp_path / f"{n}.log").read_text().split()) for n in ("now", "before"))
    assert len(now) == len(before) == 1 and now != before
