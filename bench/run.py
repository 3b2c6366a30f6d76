"""All of sand's benchmarks in one command: ``python bench/run.py [--quick]``.

Each section measures in one run and prints ratios against its baseline, so
the figures compare like with like on whatever machine runs them. ``--quick``
runs every section at a small size (seconds, not minutes): figures too small to
judge by, but proof that each section still runs to its end.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (title, module, function, the function's keyword arguments under --quick;
# None: the section is left out of a quick run, with the reason).
SECTIONS: list[tuple[str, str, str, dict[str, Any] | str]] = [
    ("startup", "bench.core", "startup", {"runs": 3}),
    (
        "import cost of sand --version and sand validate (python -X importtime)",
        "bench.core",
        "import_cost",
        {},
    ),
    ("fleet plan (pure)", "bench.core", "fleet_plan", {"sizes": (10,)}),
    (
        "sand plan process on a converged fakepve fleet (1, 1000, 5000 VMs) against the floor",
        "bench.fleet_cli",
        "rows",
        {"sizes": (20,), "runs": 1},
    ),
    (
        "Proxmox no-op observe vs per-VM reads (fakepve)",
        "bench.proxmox_noop",
        "rows",
        {"sizes": (10,), "runs": 1},
    ),
    (
        "preflight cost of a plan with N creates (fakepve)",
        "bench.preflight_cost",
        "rows",
        {"sizes": (1, 5)},
    ),
    (
        "cold creates on fakepve: requests per VM, slow clones beside an ideal scheduler",
        "bench.create_throughput",
        "rows",
        {"sizes": (4,), "request_sizes": (2,), "clone_secs": 0.5},
    ),
    ("watch save-to-plan latency", "bench.watch_latency", "rows", {"saves": 1}),
    (
        "sand ui: first frame on 200 VMs, keys during 1000-VM refreshes",
        "bench.ui_board",
        "rows",
        {"first_frame_vms": 20, "refresh_vms": 50, "runs": 1},
    ),
    (
        "sand sync: push-to-apply-start latency, webhook vs polling",
        "bench.sync_latency",
        "rows",
        {"commits": 1, "interval": 1.0},
    ),
    (
        "one-writer lease: requests per apply on Proxmox (fakepve)",
        "bench.lease_cost",
        "rows",
        {"sizes": (1,)},
    ),
    (
        "time to a ready VM: full provisioning vs a golden base (real guests)",
        "bench.golden_bases",
        "rows",
        "real guests take minutes",
    ),
    (
        "time to ready: full vs golden clone vs warm claim vs fork (real guests)",
        "bench.time_to_ready",
        "rows",
        "real guests take minutes",
    ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only sections whose title contains this")
    parser.add_argument(
        "--quick", action="store_true", help="every section at a small size, in seconds"
    )
    args = parser.parse_args(argv)
    failed: list[str] = []
    for title, module, func, quick in SECTIONS:
        if args.only and args.only not in title:
            continue
        print(f"\n## {title}", flush=True)
        if args.quick and isinstance(quick, str):
            print(f"  (left out of --quick: {quick})")
            continue
        kwargs = quick if args.quick and isinstance(quick, dict) else {}
        started = time.perf_counter()
        try:
            rows = getattr(importlib.import_module(module), func)(**kwargs)
        except Exception:  # one broken section must not hide the others' figures
            traceback.print_exc()
            print("  (FAILED)")
            failed.append(title)
            continue
        width = max((len(k) for k, _ in rows), default=0)
        for key, value in rows:
            print(f"  {key.ljust(width)}  {value}")
        print(f"  ({time.perf_counter() - started:.1f}s)", flush=True)
    if failed:
        print(f"\n{len(failed)} section(s) failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
