"""No-op observe on Proxmox: sand's one listing against a per-VM-read baseline.

    python bench/proxmox_noop.py [--sizes 10,100,1000] [--runs 5] [--rtt-ms 30]

One fakepve (time scale 0, on 127.0.0.1) is seeded with N converged, managed VMs
for each N. sand observes with its backend (``GET /cluster/resources?type=vm``,
deep reads only on mismatch). The baseline reads like the Terraform providers
refresh: the listing, then per VM ``GET …/config`` and ``GET …/status/current``
(10 at a time, Terraform's default parallelism), through the same proxmoxer
client. Requests are counted on the fake's side. The last column projects both
onto a real network with the given round-trip time.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sand.backends.proxmox.backend import ProxmoxBackend  # noqa: E402
from sand.desired import DesiredVM  # noqa: E402
from sand.observed import Ownership  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402

BASELINE_PARALLELISM = 10


async def sand_noop(backend: ProxmoxBackend, desired: list[DesiredVM]) -> None:
    obs = await backend.observe(desired)
    managed = obs.managed()
    assert obs.unknown_reason is None and len(managed) == len(desired)
    want = {vm.name: vm.fingerprint for vm in desired}
    assert all(vm.fingerprint == want[vm.name] for vm in managed), "not a no-op"


async def per_vm_baseline(backend: ProxmoxBackend, desired: list[DesiredVM]) -> None:
    client = backend.ctx.client
    rows = await client.get("cluster/resources", type="vm")
    ours = [r for r in rows if not r.get("template")]
    slots = asyncio.Semaphore(BASELINE_PARALLELISM)

    async def refresh(row: dict[str, object]) -> None:
        async with slots:
            path = f"nodes/{row['node']}/qemu/{row['vmid']}"
            await client.get(f"{path}/config")
            await client.get(f"{path}/status/current")

    await asyncio.gather(*(refresh(r) for r in ours))
    assert len(ours) == len(desired)


async def measure(
    rig: FakePveRig, backend: ProxmoxBackend, desired: list[DesiredVM], fn: object, runs: int
) -> tuple[int, float]:
    await fn(backend, desired)  # type: ignore[operator]  # warm: connection, caches
    times, counts = [], []
    for _ in range(runs):
        rig.clear_log()
        started = time.perf_counter()
        await fn(backend, desired)  # type: ignore[operator]
        times.append(time.perf_counter() - started)
        counts.append(rig.count())
    assert len(set(counts)) == 1, counts
    return counts[0], statistics.median(times)


def reseed(rig: FakePveRig, n: int) -> list[DesiredVM]:
    def clear() -> None:
        rig.pve.vms[:] = [vm for vm in rig.pve.vms if vm.template]
        rig.pve.pools[rig.pool] = {vm.vmid for vm in rig.pve.vms}

    rig.run(clear)
    desired = rig.desired(
        [{"name": f"vm-{i:04d}", "memory": "4GiB", "disk": "32GiB"} for i in range(n)],
        project="bench",
    )
    for i, vm in enumerate(desired):
        rig.seed_managed(vm, 1000 + i)
    return desired


async def main_async(sizes: list[int], runs: int, rtt_ms: float) -> list[list[str]]:
    with tempfile.TemporaryDirectory(prefix="sand-bench-") as tmp:
        from fakepve.certs import make_cert

        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig((pki[0], pki[1]), Path(tmp) / "rig", time_scale=0.0)
        table: list[list[str]] = []
        try:
            backend = rig.make_backend("bench", fast=False)
            for n in sizes:
                desired = reseed(rig, n)
                s_req, s_time = await measure(rig, backend, desired, sand_noop, runs)
                b_req, b_time = await measure(rig, backend, desired, per_vm_baseline, runs)
                assert all(
                    o.ownership is Ownership.MANAGED for o in (await backend.observe(desired)).vms
                )
                # Projected: sand is one round trip; the baseline one for the listing, then
                # 2 sequential reads per VM over 10 parallel lanes.
                s_proj = rtt_ms * s_req
                b_proj = rtt_ms * (1 + 2 * math.ceil(n / BASELINE_PARALLELISM))
                table.append(
                    [
                        str(n),
                        str(s_req),
                        str(b_req),
                        f"{b_req / s_req:.0f}x",
                        f"{s_time * 1000:.1f}",
                        f"{b_time * 1000:.1f}",
                        f"{b_time / s_time:.1f}x",
                        f"{s_proj:.0f} / {b_proj:.0f}",
                    ]
                )
            await backend.close()
        finally:
            rig.stop()
    return table


def render(table: list[list[str]], rtt_ms: float) -> str:
    head = [
        "VMs",
        "sand req",
        "per-VM req",
        "req ratio",
        "sand ms",
        "per-VM ms",
        "time ratio",
        f"@{rtt_ms:.0f}ms RTT (ms)",
    ]
    rows = [head, *table]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def rows(
    sizes: tuple[int, ...] = (10, 100, 1000), runs: int = 3, rtt_ms: float = 30.0
) -> list[tuple[str, str]]:
    """The figures as (key, value) rows, for ``bench/run.py``."""
    out = []
    for n, s_req, b_req, req_x, s_ms, b_ms, time_x, proj in asyncio.run(
        main_async(list(sizes), runs, rtt_ms)
    ):
        out.append(
            (
                f"{n} VMs",
                f"sand {s_req} req {s_ms} ms; per-VM {b_req} req {b_ms} ms "
                f"({req_x} requests, {time_x} time; @{rtt_ms:.0f} ms RTT {proj} ms)",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per cell (median)")
    parser.add_argument("--rtt-ms", type=float, default=30.0, help="for the projection column")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    table = asyncio.run(main_async(sizes, args.runs, args.rtt_ms))
    print("No-op observe, Proxmox backend, fakepve time scale 0 on 127.0.0.1")
    print(
        f"(median of {args.runs}; baseline: listing + config + status/current per VM, "
        f"{BASELINE_PARALLELISM} in parallel)\n"
    )
    print(render(table, args.rtt_ms))


if __name__ == "__main__":
    main()
