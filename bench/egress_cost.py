"""What an egress policy costs on Proxmox, in requests (fakepve's log).

    python bench/egress_cost.py [--vms 1000] [--cidrs 2]

Each figure is one real ``sand`` process against a fresh fakepve (time scale 0),
counted on the fake's side:

- a no-op ``sand plan`` of N converged VMs, every one with a deny policy: the listing,
  the one read of the datacenter's firewall switch, and per VM the four reads that show
  whether a hand changed its firewall (options, rules, ``sand-egress``'s entries, config:
  docs/egress.md#drift), with the plan's wall and CPU time; with ``bench/run.py --before
  REF`` the same plan of the tree at REF beside it (before the drift read: 2 requests);
- a create with a policy of ``--cidrs`` CIDRs: the requests that write its firewall
  (PVE takes one rule or one ipset entry per request), all before its first start;
- one VM's policy changed (a CIDR added and a port): the requests about that VM, reads
  and writes of its firewall and the marker's write, against the same fleet.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core import _children_cpu, before_tree, installed_env  # noqa: E402
from bench.summary import record  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


def _policy(cidrs: int, port: int = 443) -> dict[str, Any]:
    return {"cidrs": [f"10.{20 + i}.0.0/16" for i in range(cidrs)], "ports": [port]}


def _fresh_rig(work: Path) -> FakePveRig:
    from fakepve.certs import make_cert

    pki = make_cert(str(work), hosts=("127.0.0.1",))[:2]
    rig = FakePveRig((pki[0], pki[1]), work / "pve")
    # What the operator does once (docs/egress.md): the read-only grant on /, the
    # datacenter firewall on.
    rig.grant(rig.token_id, "/", "Sys.Audit")
    rig.run(lambda: rig.pve.firewall_config("cluster")["options"].__setitem__("enable", 1))
    return rig


def _sand(
    work: Path,
    rig: FakePveRig,
    vms: list[dict[str, Any]],
    *words: str,
    tree: Path | str = ROOT,
    **backend: Any,
) -> None:
    (work / "sand.yaml").write_text(yaml.safe_dump(rig.manifest(vms, **backend)))
    env = installed_env(
        tree,
        env={
            **os.environ,
            "SAND_STATE_DIR": str(work / "state"),
            "SAND_CACHE_DIR": str(work / "cache"),
        },
    )
    argv = [sys.executable, "-m", "sand", *words]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-1000:] + done.stderr[-2000:])


def no_op_plan(
    vms: int, cidrs: int, tree: Path | str = ROOT, *, drift: bool = True
) -> tuple[list[str], float, float]:
    """The requests, wall and CPU seconds of a no-op plan of ``vms`` converged VMs with
    deny policies (their firewalls as sand writes them), by ``tree``'s sand; ``drift``
    False: with the backend's ``egress_drift: false``."""
    with tempfile.TemporaryDirectory(prefix="sand-bench-") as tmp:
        work = Path(tmp)
        rig = _fresh_rig(work)
        try:
            entries = [{"name": f"vm-{i:04d}", "egress": _policy(cidrs)} for i in range(vms)]
            for i, vm in enumerate(rig.desired(entries)):
                rig.seed_managed(vm, 1000 + i)
            backend = {} if drift else {"egress_drift": False}
            # The first writes the cache (and the bytecode): the second is measured.
            _sand(work, rig, entries, "plan", "--detailed-exitcode", tree=tree, **backend)
            rig.clear_log()
            used, started = _children_cpu(), time.perf_counter()
            _sand(work, rig, entries, "plan", "--detailed-exitcode", tree=tree, **backend)
            wall, cpu = time.perf_counter() - started, _children_cpu() - used
            return [str(r) for r in rig.log], wall, cpu
        finally:
            rig.stop()


def _kinds(requests: list[str]) -> str:
    """The requests counted by what they ask (a path's vmid left out)."""
    counts: dict[str, int] = {}
    for request in requests:
        method, path = request.split(" ")[:2]
        key = f"{method} " + "/".join("{vmid}" if p.isdigit() else p for p in path.split("/"))
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def create_and_change(vms: int, cidrs: int) -> tuple[int, int, int]:
    """(firewall requests of one create, requests about the VM whose policy changed,
    all the change's requests) in a fleet of ``vms``."""
    with tempfile.TemporaryDirectory(prefix="sand-bench-") as tmp:
        work = Path(tmp)
        rig = _fresh_rig(work)
        try:
            entries = [{"name": f"vm-{i:03d}", "egress": _policy(cidrs)} for i in range(vms)]
            _sand(work, rig, entries[:1], "apply", "--auto-approve")
            (first,) = rig.vms()
            create = sum(1 for r in rig.log if "/firewall/" in r.path and r.method != "GET")
            _sand(work, rig, entries, "apply", "--auto-approve")
            rig.clear_log()
            changed = {**entries[0], "egress": _policy(cidrs + 1, port=22)}
            _sand(work, rig, [changed, *entries[1:]], "apply", "--auto-approve")
            mine = [r for r in rig.log if f"/qemu/{first.vmid}/" in r.path + "/"]
            ipset = rig.run(rig.pve.firewall_config, "vm", "pve1", first.vmid)["ipset"]
            assert len(ipset["sand-egress"]) == cidrs + 1, "the change did not land"
            return create, len(mine), len(rig.log)
        finally:
            rig.stop()


def rows(vms: int = 1000, change_vms: int = 10, cidrs: int = 2) -> list[tuple[str, str]]:
    plan, wall, cpu = no_op_plan(vms, cidrs)
    before = before_tree()
    was = no_op_plan(vms, cidrs, before) if before else None
    out = [
        (f"N={vms} with deny policies: no-op plan, requests", f"{len(plan)}: {_kinds(plan)}"),
        (f"N={vms}: no-op plan, wall / CPU (the sand process)", f"{wall:.2f} s / {cpu:.2f} s"),
    ]
    if was is not None:
        out.append(
            (
                f"N={vms}: the tree before, requests, wall / CPU",
                f"{len(was[0])}: {_kinds(was[0])}; {was[1]:.2f} s / {was[2]:.2f} s",
            )
        )
    record(
        f"Proxmox no-op plan, {vms} VMs with egress policies: requests",
        len(plan),
        "requests",
        before=len(was[0]) if was else None,
        goal="the listing + the datacenter switch + 4 firewall reads a VM (drift)",
    )
    record(
        f"Proxmox no-op plan, {vms} VMs with egress policies: wall",
        wall,
        "s",
        before=was[1] if was else None,
    )
    record(
        f"Proxmox no-op plan, {vms} VMs with egress policies: CPU",
        cpu,
        "s",
        before=was[2] if was else None,
    )
    quick, quick_wall, quick_cpu = no_op_plan(vms, cidrs, drift=False)
    out.append(
        (
            f"N={vms}, egress_drift: false: no-op plan, requests, wall / CPU",
            f"{len(quick)}: {_kinds(quick)}; {quick_wall:.2f} s / {quick_cpu:.2f} s",
        )
    )
    record(
        f"Proxmox no-op plan, {vms} VMs with egress policies, egress_drift false: requests",
        len(quick),
        "requests",
        goal="the listing + the datacenter switch, at any N",
    )
    create, on_vm, total = create_and_change(change_vms, cidrs)
    out.append(
        (
            f"a create with {cidrs} CIDRs: firewall writes",
            f"{create} (options 1 + ipset 1 + one per CIDR {cidrs} + rule 1)",
        )
    )
    out.append(
        (
            f"N={change_vms}: one VM's policy changed, requests",
            f"{on_vm} on the VM, {total} in all (fixed cost {total - on_vm})",
        )
    )
    record(
        f"Proxmox egress create ({cidrs} CIDRs): firewall writes",
        create,
        "requests",
        goal=f"{3 + cidrs} (PVE takes one entry per request)",
    )
    record(f"Proxmox egress change, N={change_vms}: requests on the VM", on_vm, "requests")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--change-vms", type=int, default=10)
    parser.add_argument("--cidrs", type=int, default=2)
    args = parser.parse_args()
    for key, value in rows(args.vms, args.change_vms, args.cidrs):
        print(f"{key:48} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
