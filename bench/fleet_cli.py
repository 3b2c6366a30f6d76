"""The real `sand plan` process on a converged fleet on fakepve (1, 1000 and 5000
VMs): wall time against the floor and, optionally, another checkout; peak memory
(the sand process's own max RSS) and API requests per plan.

    python bench/fleet_cli.py [--sizes 1,1000,5000] [--runs 5] [--before ../main]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core import before_tree, installed_env  # noqa: E402
from bench.summary import record  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402

# The goals of issues 27 and 41, by fleet size (a no-op plan, medians, one run): the
# process's CPU time, the figure a shared machine's load stretches least.
GOALS = {1000: "≤ 300 ms", 5000: "≤ 600 ms"}

# Starts the command from a small interpreter and reports its peak RSS. Asked of this
# process instead (os.wait4 on our own child), the figure is wrong: Popen's vfork child
# shares our address space until it execs, and Linux carries the high-water RSS of the
# address space an exec leaves into the new program's maxrss, so the bench's own memory
# (the fake PVE with its 1000 VMs) was reported as sand's (82 MiB against 60 MiB).
_PROBE = """
import json, os, resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - started
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([seconds, code, used.ru_maxrss, used.ru_utime + used.ru_stime]))
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int, float]:
    """Wall seconds, exit code, max RSS (KiB) and CPU seconds (user + system) of one
    process running ``argv``. The CPU time is the steadier figure on a shared machine:
    others' load stretches the wall time of a process far more than its CPU time."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, code, maxrss, cpu = json.loads(out.stdout)
    return float(seconds), int(code), int(maxrss), float(cpu)


def _curl_listing(rig: FakePveRig, work: Path) -> list[str]:
    """One ``curl`` of the listing sand plans from: the floor of a plan's round trip.
    The token goes in a header file (never in argv)."""
    header = work / "curl-header"
    secret = rig.token_file.read_text(encoding="utf-8").strip()
    header.write_text(f"Authorization: PVEAPIToken={secret}\n", encoding="utf-8")
    header.chmod(0o600)
    url = f"{rig.url}/api2/json/cluster/resources?type=vm"
    return ["curl", "-sf", "-o", "/dev/null", "--cacert", rig.ca_file, "-H", f"@{header}", url]


def measure(vms: int, runs: int, before: str | None = None) -> dict[str, float]:
    """A no-op ``sand plan`` of ``vms`` converged VMs: medians of ``runs``, against the
    floor (``python -c pass`` + one curl of the listing) and, given the path of another
    checkout (``before``), the same plan by that tree's sand."""
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig(pki, work / "pve")
        try:
            entries = [{"name": f"vm-{i:04d}"} for i in range(vms)]
            for i, vm in enumerate(rig.desired(entries)):
                rig.seed_managed(vm, 1000 + i)
            (work / "sand.yaml").write_text(yaml.safe_dump(rig.manifest(entries)))
            # The desired-state cache in the bench's own directory: written by the first
            # (untimed) plan, read by the timed ones, as by a person planning again.
            env = installed_env(
                env={
                    **os.environ,
                    "SAND_STATE_DIR": str(work / "state"),
                    "SAND_CACHE_DIR": str(work / "cache"),
                }
            )
            argv = [sys.executable, "-m", "sand", "plan", "--detailed-exitcode"]

            trees = {"now": env}
            if before:
                trees["before"] = installed_env(before, env)
            for tree in trees.values():
                _run(argv, tree, work)  # compiles the tree's bytecode: not timed
            times: dict[str, list[float]] = {k: [] for k in trees}
            cpus: dict[str, list[float]] = {k: [] for k in trees}
            rss, requests, bare, curl, first = [], 0, [], [], []
            for run in range(runs):  # each figure in turn, so a drift of the machine hits all
                # A first plan: no cache yet (a cache directory of its own, empty).
                fresh = {**env, "SAND_CACHE_DIR": str(work / f"cache-{run}")}
                first.append(_run(argv, fresh, work)[3])
                for key, tree in trees.items():
                    rig.clear_log()
                    seconds, code, maxrss, cpu = _run(argv, tree, work)
                    assert code == 0, "a converged fleet must plan no changes (exit 0)"
                    times[key].append(seconds)
                    cpus[key].append(cpu)
                    if key == "now":
                        rss.append(maxrss)
                        requests = len(rig.log)
                bare.append(_run([sys.executable, "-c", "pass"], env, work)[0])
                curl.append(_run(_curl_listing(rig, work), env, work)[0])
            out = {
                "seconds": statistics.median(times["now"]),
                "cpu": statistics.median(cpus["now"]),
                "bare": statistics.median(bare),
                "curl": statistics.median(curl),
                "cpu_first": statistics.median(first),
                "rss_mib": max(rss) / 1024,
                "requests": requests,
            }
            if before:
                out["before"] = statistics.median(times["before"])
                out["cpu_before"] = statistics.median(cpus["before"])
            return out
        finally:
            rig.stop()


def rows(
    sizes: tuple[int, ...] = (1, 1000, 5000), runs: int = 5, before: str | None = None
) -> list[tuple[str, str]]:
    """``before``: another checkout to compare with (default: $SAND_BENCH_BEFORE)."""
    before = before or before_tree()
    out = []
    for vms in sizes:
        m = measure(vms, runs, before)
        floor = m["bare"] + m["curl"]
        said = (
            f"{m['seconds'] * 1000:.0f} ms (median of {runs}); floor {floor * 1000:.0f} ms "
            f"(python -c pass {m['bare'] * 1000:.0f} + curl of the listing "
            f"{m['curl'] * 1000:.0f}), {m['seconds'] / floor:.1f}x the floor"
        )
        if "before" in m:
            said += f"; before {m['before'] * 1000:.0f} ms ({m['before'] / m['seconds']:.2f}x)"
        said += f"; CPU {m['cpu'] * 1000:.0f} ms (a first plan {m['cpu_first'] * 1000:.0f} ms)"
        if "cpu_before" in m:
            said += f" (before {m['cpu_before'] * 1000:.0f} ms)"
        record(
            f"sand plan, {vms} converged VMs (no-op)",
            m["seconds"] * 1000,
            "ms",
            baseline=("floor", floor * 1000),
            before=m["before"] * 1000 if "before" in m else None,
        )
        record(
            f"  its CPU time (user + system), {vms} VMs",
            m["cpu"] * 1000,
            "ms",
            before=m["cpu_before"] * 1000 if "cpu_before" in m else None,
            goal=GOALS.get(vms, ""),
        )
        record(
            f"  its CPU time on a first plan (no desired-state cache), {vms} VMs",
            m["cpu_first"] * 1000,
            "ms",
            before=m["cpu_before"] * 1000 if "cpu_before" in m else None,
        )
        record(f"  its peak memory (max RSS), {vms} VMs", m["rss_mib"], "MiB")
        out += [
            (f"sand plan, {vms} converged VMs", said),
            (
                "  peak memory (max RSS), requests",
                f"{m['rss_mib']:.0f} MiB, {m['requests']:.0f} (one listing)",
            ),
        ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,1000,5000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="another checkout's root, to compare with")
    args = parser.parse_args()
    sizes = tuple(int(n) for n in args.sizes.split(",") if n)
    for key, value in rows(sizes, args.runs, args.before):
        print(f"{key:34} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
