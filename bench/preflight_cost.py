"""What preflight costs a plan with changes, by the number of VMs being created.

    python bench/preflight_cost.py [--sizes 1,10,100]

One fakepve (time scale 0, on 127.0.0.1). For each N, a plan that creates N VMs
from one template: the requests of the listing alone, of listing + preflight,
and preflight's wall time. Preflight's requests must not grow with N (nodes,
storages, bridges per target node; templates come from the listing), and a
no-op plan makes none.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sand.backends.protocol import PreflightItem  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


async def one(rig: FakePveRig, n: int) -> tuple[int, int, float]:
    backend = rig.make_backend()
    desired = rig.desired([{"name": f"vm-{i}", "memory": "1GiB"} for i in range(n)])
    try:
        rig.clear_log()
        await backend.observe(desired)
        listing = rig.count()
        started = time.perf_counter()
        report = await backend.preflight([PreflightItem(vm, "create") for vm in desired])
        seconds = time.perf_counter() - started
        assert not report.problems, report.problems
        return listing, rig.count() - listing, seconds
    finally:
        await backend.close()


def rows(sizes: tuple[int, ...] = (1, 10, 100)) -> list[tuple[str, str]]:
    from fakepve.certs import make_cert

    out: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cert, key, _ = make_cert(tmp, hosts=("127.0.0.1",))
        rig = FakePveRig((cert, key), Path(tmp) / "rig")
        try:
            first = None
            for n in sizes:
                listing, extra, seconds = asyncio.run(one(rig, n))
                first = extra if first is None else first
                out.append(
                    (
                        f"N={n} creates",
                        f"listing {listing} request, preflight +{extra} requests "
                        f"({extra / max(first, 1):.1f}x N=1's), {seconds * 1000:.1f} ms",
                    )
                )
        finally:
            rig.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,10,100")
    args = parser.parse_args()
    for k, v in rows(tuple(int(x) for x in args.sizes.split(","))):
        print(f"{k}  {v}")
