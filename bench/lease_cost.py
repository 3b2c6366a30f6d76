"""The one-writer lease's cost on Proxmox: requests per apply, for fleets of N VMs.

    python bench/lease_cost.py [--sizes 1,10,50]

For each N, a fresh fakepve (time scale 0) and real ``sand apply --auto-approve``
processes: one creates N VMs, one changes every VM's CPU count, one finds nothing to
do. Requests are counted on the fake's side; those the lease spends are the ones to
its object's config. Target: at most 3 per apply that changes something, whatever N,
and none for a no-op.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


def apply(work: Path, rig: FakePveRig, vms: list[dict[str, object]]) -> tuple[int, int]:
    """(lease requests, all requests) of one ``sand apply --auto-approve``."""
    (work / "sand.yaml").write_text(yaml.safe_dump(rig.manifest(vms)))
    rig.clear_log()
    env = {**os.environ, "SAND_STATE_DIR": str(work / "state"), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "sand", "apply", "--auto-approve", "--allow-mass-delete"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    leases = rig.lease_vms()
    paths = {f"/nodes/{vm.node}/qemu/{vm.vmid}/config" for vm in leases}
    # Making the object, once per project: its create and the task polls of it.
    making = {f"/nodes/{vm.node}/qemu" for vm in leases}
    spent = [r for r in rig.log if r.path in paths | making or ":qmcreate:" in r.path]
    return len(spent), len(rig.log)


def measure(
    sizes: list[int],
) -> list[tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]]:
    from fakepve.certs import make_cert

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        for n in sizes:
            work = Path(tmp) / f"n{n}"
            work.mkdir()
            rig = FakePveRig(pki, work / "pve")
            try:
                made = apply(work, rig, [{"name": f"b-{i}"} for i in range(n)])
                changed = apply(work, rig, [{"name": f"b-{i}", "cpus": 3} for i in range(n)])
                noop = apply(work, rig, [{"name": f"b-{i}", "cpus": 3} for i in range(n)])
            finally:
                rig.stop()
            out.append((n, made, changed, noop))
    return out


def rows(sizes: tuple[int, ...] = (1, 10, 50)) -> list[tuple[str, str]]:
    result = []
    for n, made, changed, noop in measure(list(sizes)):
        result.append(
            (
                f"N={n}: lease requests (of all)",
                f"first apply {made[0]} ({made[1]}; making the object once also costs a "
                "nextid and two listings), "
                f"change all {changed[0]} ({changed[1]}), no-op {noop[0]} ({noop[1]}); "
                "target ≤ 3, 0 for a no-op",
            )
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,10,50")
    args = parser.parse_args()
    for key, value in rows(tuple(int(s) for s in args.sizes.split(","))):
        print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
