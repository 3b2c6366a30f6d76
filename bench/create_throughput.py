"""Create throughput: 50 VMs on fakepve with real task durations, against the
ideal parallel bound.

    python bench/create_throughput.py [--vms 50] [--clone-secs 1.0] [--start-secs 0.5]

Clones are the bottleneck PVE imposes (a storage lock per clone); sand runs at
most ``clone_parallelism`` (default 2) clones per backend at once, and
everything else (config, resize, start) in parallel up to ``--parallelism``
(default 10). The ideal bound is therefore ceil(N / 2) clone durations plus
one start; the ratio says how much polling and API overhead sand adds.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sand.apply.engine import execute  # noqa: E402
from sand.desired import build_desired  # noqa: E402
from sand.manifest.models import Manifest  # noqa: E402
from sand.plan import make_plan  # noqa: E402
from sand.state.journal import Journal  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


async def _no_provisioning(*_args: object) -> None:
    raise AssertionError("benchmark runs with provision: false")


def measure(vms: int, clone_secs: float, start_secs: float, parallelism: int) -> dict[str, float]:
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig(pki, Path(tmp) / "pve", time_scale=1.0)
        try:
            rig.set_task_secs("qmclone", clone_secs)
            rig.set_task_secs("qmstart", start_secs)
            manifest = Manifest.model_validate(
                rig.manifest([{"name": f"c-{i:03d}"} for i in range(vms)])
            )
            state = build_desired(manifest)
            backend = rig.make_backend(fast=False)  # the product's own poll and retry policy
            journal = Journal(Path(tmp) / "journal.jsonl")

            async def run() -> tuple[float, bool]:
                obs = await backend.observe(state.vms)
                plan = make_plan(state, {"pve": obs}, {"pve": backend.capabilities})
                started = time.perf_counter()
                result = await execute(
                    plan, {"pve": backend}, journal, _no_provisioning, parallelism=parallelism
                )
                elapsed = time.perf_counter() - started
                await backend.close()
                return elapsed, result.ok

            elapsed, ok = asyncio.run(run())
            assert ok and len(rig.vms()) == vms
            ideal = math.ceil(vms / backend.clone_parallelism) * clone_secs + start_secs
            return {"elapsed": elapsed, "ideal": ideal, "requests": float(len(rig.log))}
        finally:
            rig.stop()


def rows(vms: int = 50, clone_secs: float = 1.0, start_secs: float = 0.5) -> list[tuple[str, str]]:
    m = measure(vms, clone_secs, start_secs, parallelism=10)
    serial = vms * (clone_secs + start_secs)
    return [
        (f"{vms} creates, clone {clone_secs}s, start {start_secs}s", f"{m['elapsed']:.1f} s"),
        ("ideal bound (2 clones at a time)", f"{m['ideal']:.1f} s"),
        ("ratio to ideal", f"{m['elapsed'] / m['ideal']:.2f}x"),
        ("speed-up over one at a time", f"{serial / m['elapsed']:.1f}x (serial {serial:.0f} s)"),
        ("API requests per VM", f"{m['requests'] / vms:.1f}"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=50)
    parser.add_argument("--clone-secs", type=float, default=1.0)
    parser.add_argument("--start-secs", type=float, default=0.5)
    args = parser.parse_args()
    for key, value in rows(args.vms, args.clone_secs, args.start_secs):
        print(f"{key:45} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
