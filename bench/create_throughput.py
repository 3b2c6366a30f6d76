"""Cold creates on fakepve: requests per VM by endpoint, and time with slow clones
beside the time an ideal scheduler would take.

    python bench/create_throughput.py [--sizes 10,50] [--clone-secs 5] [--scale 1]

Requests: N VMs created with tasks that end at once (fakepve time scale 0), the
request log grouped by endpoint. Slow clones: PVE seconds scaled to real ones by
``--scale`` (1: real time; sand's own waits are never scaled, so a scale below 1
magnifies its polling). sand runs at most ``clone_parallelism``
clones per backend at once, the rest of each create in parallel; the ideal
scheduler runs ceil(N / k) waves of clones, then one start, with no API time.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.summary import record  # noqa: E402
from sand.apply.engine import execute  # noqa: E402
from sand.backends.lease import LeaseHolder  # noqa: E402
from sand.desired import build_desired  # noqa: E402
from sand.manifest.models import Manifest  # noqa: E402
from sand.plan import make_plan  # noqa: E402
from sand.state.journal import Journal  # noqa: E402
from sand.survey.preflight import items_of  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402

START_SECS = 1.0  # PVE seconds of a start task
TEMPLATE_DISK = "4GiB"  # the rig's template disk: a VM of that size is not resized


async def _no_provisioning(*_args: object) -> None:
    raise AssertionError("benchmark runs with provision: false")


def _endpoint(method: str, path: str) -> str:
    path = re.sub(r"/qemu/\d+", "/qemu/{id}", path)
    return f"{method} {re.sub(r'/tasks/[^/]+', '/tasks/{upid}', path)}"


def measure(
    vms: int,
    clone_secs: float,
    scale: float,
    clone_parallelism: int | None = None,
    disk: str | None = None,
) -> dict[str, object]:
    """One cold apply of ``vms`` creates under the project's lease, as ``sand apply``
    runs them: seconds, the backend's clone parallelism and the request log by
    endpoint (the lease's own requests are per apply, not per VM). ``disk``: the VMs'
    disk size (None: the default, larger than the template's: each VM is resized)."""
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig(pki, Path(tmp) / "pve", time_scale=scale)
        try:
            rig.set_task_secs("qmclone", clone_secs)
            rig.set_task_secs("qmstart", START_SECS)
            manifest = Manifest.model_validate(
                rig.manifest(
                    [{"name": f"c-{i:03d}", **({"disk": disk} if disk else {})} for i in range(vms)]
                )
            )
            state = build_desired(manifest)
            overrides: dict[str, Any] = (
                {} if clone_parallelism is None else {"clone_parallelism": clone_parallelism}
            )
            backend = rig.make_backend(fast=False, **overrides)  # the product's own policies
            journal = Journal(Path(tmp) / "journal.jsonl")

            async def run() -> tuple[float, bool, Counter[str]]:
                obs = await backend.observe(state.vms)
                plan = make_plan(state, {"pve": obs}, {"pve": backend.capabilities})
                await backend.preflight(items_of(list(plan.changes)))  # as `sand apply` plans
                async with backend.lease(LeaseHolder.here(command="bench"), ttl=60.0):
                    rig.clear_log()  # the lease's take and release: bench.lease_cost
                    started = time.perf_counter()
                    result = await execute(plan, {"pve": backend}, journal, _no_provisioning)
                    elapsed = time.perf_counter() - started
                    spent = Counter(_endpoint(r.method, r.path) for r in rig.log)
                await backend.close()
                return elapsed, result.ok, spent

            elapsed, ok, spent = asyncio.run(run())
            assert ok and len([v for v in rig.vms() if v.name.startswith("c-")]) == vms
            return {"elapsed": elapsed, "k": backend.clone_parallelism, "requests": spent}
        finally:
            rig.stop()


def request_rows(sizes: tuple[int, ...] = (10, 50, 200)) -> list[tuple[str, str]]:
    out = []
    for n in sizes:
        for disk, what in ((None, "disk grown"), (TEMPLATE_DISK, "disk as the template's")):
            spent = measure(n, 0.0, 0.0, disk=disk)["requests"]
            assert isinstance(spent, Counter)
            total = sum(spent.values())
            title = f"N={n} cold create ({what}): requests per VM"
            out.append((title, f"{total / n:.1f} ({total} in all)"))
            record(f"Proxmox cold create, N={n}, {what}", total / n, "requests/VM", goal="≤ 6")
            out += [
                (f"  {k}", f"{v / n:.2f}") for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
            ]
    return out


def slow_rows(
    sizes: tuple[int, ...] = (10, 50), clone_secs: float = 5.0, scale: float = 1.0
) -> list[tuple[str, str]]:
    out = []
    for n in sizes:
        m = measure(n, clone_secs, scale)
        k = int(str(m["k"]))
        seconds = float(str(m["elapsed"]))
        ideal = (math.ceil(n / k) * clone_secs + START_SECS) * scale
        forks10 = (math.ceil(n / 10) * clone_secs + START_SECS) * scale
        record(
            f"Proxmox cold create, N={n}, {clone_secs * scale:g} s clones, {k} at a time",
            seconds,
            "s",
            baseline=("ideal scheduler", ideal),
        )
        out.append(
            (
                f"N={n}, {clone_secs * scale:g} s clones, {k} at a time (default)",
                f"{seconds:.1f} s; ideal {ideal:.1f} s ({seconds / ideal:.2f}x); "
                f"ideal at 10 at a time {forks10:.1f} s",
            )
        )
    return out


def rows(
    sizes: tuple[int, ...] = (10, 50),
    request_sizes: tuple[int, ...] = (10, 50, 200),
    clone_secs: float = 5.0,
    scale: float = 1.0,
) -> list[tuple[str, str]]:
    return request_rows(request_sizes) + slow_rows(sizes, clone_secs, scale)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,50")
    parser.add_argument("--request-sizes", default="10,50,200")
    parser.add_argument("--clone-secs", type=float, default=5.0)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(",") if s)
    request_sizes = tuple(int(s) for s in args.request_sizes.split(",") if s)
    for key, value in rows(sizes, request_sizes, args.clone_secs, args.scale):
        print(f"{key:52} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
