"""All of sand's benchmarks in one command: ``python bench/run.py [--quick] [--before REF]``.

Each section measures in one run and prints ratios against its baseline, so
the figures compare like with like on whatever machine runs them; a summary table
ends the run, every headline figure beside its floor, the tree before (``--before
REF``: that git revision of this repository, measured in the same run) and its goal.
``--quick`` runs every section at a small size (seconds, not minutes): figures too
small to judge by, but proof that each section still runs to its end.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import summary  # noqa: E402

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
        {"sizes": (1, 20), "runs": 1},
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
    (
        "cold apply bookkeeping: the journal's records and the progress lines of N creates",
        "bench.cold_bookkeeping",
        "rows",
        {"sizes": (5,), "runs": 1},
    ),
    (
        "slow clones on fakepve: sand at its defaults beside Ansible's proxmox_kvm at forks=10",
        "bench.ansible_clones",
        "rows",
        "needs Ansible (optional) and takes minutes",
    ),
    (
        "cold creates on Lima (limactl stand-in): limactl calls per VM",
        "bench.lima_create",
        "rows",
        {"sizes": (1, 4)},
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
        "Proxmox requests: a one-field change, nextid at N creates (fakepve)",
        "bench.change_cost",
        "rows",
        {"vms": 2, "create_vms": 5},
    ),
    (
        "egress on Proxmox: a no-op plan of 1,000 VMs with policies, a create, a change (fakepve)",
        "bench.egress_cost",
        "rows",
        {"vms": 5, "change_vms": 2},
    ),
    (
        "generators: 50 items in one plan, label → VM claimed from a warm pool (fakepve)",
        "bench.generators",
        "rows",
        {"items": 5, "labels": 1, "interval": 1.0, "scale": 0.0},
    ),
    (
        "audit log: append p99, 1,000,000 records verified",
        "bench.audit_log",
        "rows",
        {"appends_n": 200, "records": 5000},
    ),
    (
        "credential broker: a brokered git operation or API call vs a direct one (rig, HTTPS)",
        "bench.broker_cost",
        "rows",
        {"runs": 2},
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
    (
        "time to ready with real boots: full vs golden clone vs warm claim vs fork (qemu TCG)",
        "bench.time_to_ready_boot",
        "rows",
        "five TCG boots take many minutes",
    ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        help="run only sections whose title contains this (repeatable: any of them)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="every section at a small size, in seconds"
    )
    parser.add_argument(
        "--before",
        metavar="REF",
        help="a git revision of this repository to measure beside the tree (startup, plan)",
    )
    args = parser.parse_args(argv)
    with _before(args.before):
        return _sections(args)


@contextlib.contextmanager
def _before(ref: str | None) -> Iterator[None]:
    """The tree at ``ref``, unpacked in a temporary directory (no worktree is made) and
    named to the sections by $SAND_BENCH_BEFORE."""
    if ref is None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="sand-before-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        os.environ["SAND_BENCH_BEFORE"] = tmp
        try:
            yield
        finally:
            del os.environ["SAND_BENCH_BEFORE"]


def _sections(args: argparse.Namespace) -> int:
    failed: list[str] = []
    for title, module, func, quick in SECTIONS:
        if args.only and not any(word in title for word in args.only):
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
    print("\n## summary (ratios: value / the other; below 1 is faster or fewer)")
    for line in summary.table():
        print(f"  {line}")
    if failed:
        print(f"\n{len(failed)} section(s) failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
