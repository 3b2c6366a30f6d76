"""What a change and a batch of creates cost on Proxmox, in requests (fakepve's log).

    python bench/change_cost.py [--vms 10] [--creates 200] [--before DIR]

Each figure is one real ``sand apply --auto-approve`` process against a fresh fakepve
(time scale 0), counted on the fake's side, by this tree's sand and, given another
checkout (``--before``, or ``bench/run.py --before REF``), by that tree's, in one run:

- a one-field change: N converged VMs, then one VM's memory changed (it runs: a
  restart): the requests about that VM (its paths and its tasks), and all the run's
  (the rest is the run's fixed cost: the listing, preflight, the project's lease);
- N creates: ``/cluster/nextid`` calls and clones PVE refused "already exists" (each
  one a retry).
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

from bench.core import before_tree, installed_env  # noqa: E402
from bench.summary import record  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


def _apply(work: Path, rig: FakePveRig, vms: list[dict[str, object]], tree: Path | str) -> None:
    (work / "sand.yaml").write_text(yaml.safe_dump(rig.manifest(vms)))
    env = installed_env(tree, {**os.environ, "SAND_STATE_DIR": str(work / "state")})
    argv = [sys.executable, "-m", "sand", "apply", "--auto-approve", "--allow-mass-delete"]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-1000:] + done.stderr[-2000:])


def _fresh_rig(work: Path) -> FakePveRig:
    from fakepve.certs import make_cert

    pki = make_cert(str(work), hosts=("127.0.0.1",))[:2]
    return FakePveRig((pki[0], pki[1]), work / "pve")


def one_field(vms: int, tree: Path | str) -> tuple[int, int]:
    """(requests about the changed VM, all the run's requests) of a memory change."""
    with tempfile.TemporaryDirectory(prefix="sand-bench-") as tmp:
        work = Path(tmp)
        rig = _fresh_rig(work)
        try:
            entries: list[dict[str, object]] = [
                {"name": f"vm-{i:03d}", "memory": "2GiB"} for i in range(vms)
            ]
            _apply(work, rig, entries, tree)
            (target,) = rig.vms_named("vm-000")
            rig.clear_log()
            _apply(work, rig, [{**entries[0], "memory": "3GiB"}, *entries[1:]], tree)
            mine = [
                r
                for r in rig.log
                if f"/qemu/{target.vmid}/" in r.path + "/" or f":{target.vmid}:" in r.path
            ]
            changed = rig.vm(target.vmid)
            assert changed is not None and int(changed.config["memory"]) == 3072
            return len(mine), len(rig.log)
        finally:
            rig.stop()


LATE = 0.02  # seconds a nextid answer takes to arrive on a loaded host


def creates(vms: int, tree: Path | str, late: float = 0.0) -> tuple[int, int]:
    """(``/cluster/nextid`` calls, clones refused) of one apply creating ``vms`` VMs,
    nextid's answers arriving ``late`` seconds after PVE made them."""
    with tempfile.TemporaryDirectory(prefix="sand-bench-") as tmp:
        work = Path(tmp)
        rig = _fresh_rig(work)
        rig.delay_answers("GET", "/cluster/nextid", late)
        try:
            _apply(work, rig, [{"name": f"c-{i:03d}"} for i in range(vms)], tree)
            assert len(rig.vms()) == vms
            refused = sum(1 for r in rig.requests("POST", contains="/clone") if r.status != 200)
            return rig.count("GET", "/cluster/nextid"), refused
        finally:
            rig.stop()


def rows(vms: int = 10, create_vms: int = 200, before: str | None = None) -> list[tuple[str, str]]:
    """``before``: another checkout to compare with (default: $SAND_BENCH_BEFORE)."""
    before = before or before_tree()
    trees: dict[str, Path | str] = {"now": ROOT, **({"before": before} if before else {})}
    change = {k: one_field(vms, tree) for k, tree in trees.items()}
    (on_vm, total), was = change["now"], change.get("before")
    said = f"{on_vm} on the VM, {total} in all (fixed cost {total - on_vm})"
    said += f"; before {was[0]} on the VM, {was[1]} in all" if was else ""
    out = [(f"N={vms}: one-field change (memory, running VM), requests", said)]
    name = f"Proxmox one-field change, N={vms}"
    record(f"{name}: requests on the VM", on_vm, "requests", goal="≤ 6", before=_at(was, 0))
    record(
        f"{name}: requests in all",
        total,
        "requests",
        goal="≤ 6 + the run's fixed cost",
        before=_at(was, 1),
    )
    for late in (0.0, LATE):
        made = {k: creates(create_vms, tree, late) for k, tree in trees.items()}
        (calls, refused), old = made["now"], made.get("before")
        how = f"N={create_vms} creates"
        how += f", nextid answers {late * 1000:.0f} ms late" if late else ""
        said = f"nextid {calls}, clones refused (retried) {refused}"
        said += f"; before nextid {old[0]}, refused {old[1]}" if old else ""
        out.append((f"{how}: nextid calls, retries", said))
        record(f"Proxmox {how}: nextid retries", refused, "retries", goal="0", before=_at(old, 1))
        record(f"Proxmox {how}: nextid calls", calls, "calls", goal="1", before=_at(old, 0))
    return out


def _at(figures: tuple[int, int] | None, i: int) -> int | None:
    return figures[i] if figures else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=10)
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--before", help="another checkout's root, to compare with")
    args = parser.parse_args()
    for key, value in rows(args.vms, args.creates, args.before):
        print(f"{key:48} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
