"""The real `sand plan` process on a converged 1000-VM fleet on fakepve:
wall time, peak memory (the child's max RSS) and API requests per plan.

    python bench/fleet_cli.py [--vms 1000] [--runs 3]
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

from tests.fakepve_rig.rig import FakePveRig  # noqa: E402

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
print(json.dumps([seconds, code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int]:
    """Wall seconds, exit code and max RSS (KiB) of one process running ``argv``."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, code, maxrss = json.loads(out.stdout)
    return float(seconds), int(code), int(maxrss)


def measure(vms: int, runs: int) -> dict[str, float]:
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
            env = {**os.environ, "SAND_STATE_DIR": str(work / "state")}
            argv = [sys.executable, "-m", "sand", "plan", "--detailed-exitcode"]
            times, rss = [], []
            for _ in range(runs):
                rig.clear_log()
                seconds, code, maxrss = _run(argv, env, work)
                assert code == 0, "a converged fleet must plan no changes (exit 0)"
                times.append(seconds)
                rss.append(maxrss)
            requests = len(rig.log)
            bare = [_run([sys.executable, "-c", "pass"], env, work)[0] for _ in range(runs)]
            return {
                "seconds": statistics.median(times),
                "bare": statistics.median(bare),
                "rss_mib": max(rss) / 1024,
                "requests": requests,
            }
        finally:
            rig.stop()


def rows(vms: int = 1000, runs: int = 3) -> list[tuple[str, str]]:
    m = measure(vms, runs)
    return [
        (
            f"sand plan, {vms} converged VMs",
            f"{m['seconds'] * 1000:.0f} ms wall (median of {runs})",
        ),
        ("  of which interpreter start", f"{m['bare'] * 1000:.0f} ms"),
        ("  peak memory (max RSS)", f"{m['rss_mib']:.0f} MiB"),
        ("  API requests per plan", f"{m['requests']} (one listing)"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for key, value in rows(args.vms, args.runs):
        print(f"{key:34} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
