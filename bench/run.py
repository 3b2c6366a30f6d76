"""All of sand's benchmarks in one command: ``python bench/run.py [--quick]``.

Each section measures in one run and prints ratios against its baseline, so
the figures compare like with like on whatever machine runs them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SECTIONS = [
    ("startup", "bench.core", "startup"),
    (
        "import cost of sand --version and sand validate (python -X importtime)",
        "bench.core",
        "import_cost",
    ),
    ("fleet plan (pure)", "bench.core", "fleet_plan"),
    ("sand plan process on a converged 1000-VM fakepve fleet", "bench.fleet_cli", "rows"),
    ("Proxmox no-op observe vs per-VM reads (fakepve)", "bench.proxmox_noop", "rows"),
    ("preflight cost of a plan with N creates (fakepve)", "bench.preflight_cost", "rows"),
    ("create throughput (fakepve, scaled task time)", "bench.create_throughput", "rows"),
    ("watch save-to-plan latency", "bench.watch_latency", "rows"),
    ("sand ui: first frame on 200 VMs, keys during 1000-VM refreshes", "bench.ui_board", "rows"),
    ("sand sync: push-to-apply-start latency, webhook vs polling", "bench.sync_latency", "rows"),
    ("one-writer lease: requests per apply on Proxmox (fakepve)", "bench.lease_cost", "rows"),
    (
        "time to a ready VM: full provisioning vs a golden base (real guests)",
        "bench.golden_bases",
        "rows",
    ),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="run only sections whose title contains this")
    args = parser.parse_args()
    for title, module, func in SECTIONS:
        if args.only and args.only not in title:
            continue
        print(f"\n## {title}")
        started = time.perf_counter()
        try:
            rows = getattr(importlib.import_module(module), func)()
        except ModuleNotFoundError as exc:
            print(f"  (skipped: {exc})")
            continue
        width = max((len(k) for k, _ in rows), default=0)
        for key, value in rows:
            print(f"  {key.ljust(width)}  {value}")
        print(f"  ({time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
