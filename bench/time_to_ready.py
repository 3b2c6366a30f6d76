"""Time to a ready agent VM, four ways in one run, on the real-guest rig:

    python bench/time_to_ready.py           # needs root (netns guests), like the e2e tests

"Ready" is the same for all four: SSH answers, the VM's secret is delivered and its
repository checked out (from the rig's git server, with a token). Each is sand's own
provisioner (``sand.provision``) on a real guest over SSH; the golden base is built
once first (not counted, as in ``golden_bases.py``):

1. **full provisioning**: a bare Debian guest made a workbench, then the VM's steps;
2. **golden clone**: a guest started from the frozen base (the rig's model of a
   clone) and the VM's own steps;
3. **warm claim**: a pool's spare made beforehand (a guest from the base, provisioned
   as a spare: nothing per VM), then the claiming VM's provisioning on that very guest:
   its identity (``fork-identity``), secrets and repo; the rest is already there;
4. **fork**: a provisioned VM (made beforehand, with its checkout) frozen as a fork's
   source snapshot, a guest started from that disk, and the fork's provisioning (its
   identity, secrets, its ``fork/<vm>`` branch).

Modelled, not real: a clone's disk copy and boot (a netns guest starting from an
overlay: ~0.25 s; a PVE full clone and a boot take tens of seconds, which only the
golden clone and the fork pay), and a claim's rename (one PVE config write; five
requests on fakepve, ``tests/backends/proxmox/test_pools_proxmox.py``). So the ratios
here are a floor of what a real backend shows: the steps and SSH are real.
``time_to_ready_boot.py`` measures the same four with real disks and boots (full VMs
under TCG).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.golden_bases import _provision, _spec, start_guest  # noqa: E402


def rows() -> list[tuple[str, str]]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return [("skipped", "needs root and the netns rig (as the e2e tests do)")]
    return asyncio.run(_measure())


def _ready_specs(spec: dict[str, Any], url: str) -> dict[str, Any]:
    """The bench's VMs, each with the one repo; the spare and the claiming VM; the fork."""
    from sand.desired.fork import DesiredFork
    from sand.desired.spec import with_fingerprints
    from tests.provision.helpers import repo

    app = (repo("app", url, "~/src/app", token="GIT"),)
    full = with_fingerprints(replace(spec["full"], repos=app))
    golden = with_fingerprints(replace(spec["golden"], repos=app))
    spare = with_fingerprints(
        replace(spec["golden"], name="agents-spare-1", secrets=(), pool="agents", spare=True)
    )
    claimer = with_fingerprints(replace(golden, name="agent-w", pool="agents"))
    source = with_fingerprints(replace(golden, name="agent-src"))
    fork = with_fingerprints(replace(golden, name="try-1", fork=DesiredFork("agent-src")))
    return {
        "full": full,
        "golden": golden,
        "spare": spare,
        "claim": claimer,
        "source": source,
        "fork": fork,
    }


async def ready(guest: Any, vm: Any, values: dict[str, str]) -> Any:
    """``vm`` provisioned on ``guest`` until it is ready."""
    report = await _provision(guest, vm, values)
    assert_ready(guest, vm, values)
    return report


def assert_ready(guest: Any, vm: Any, values: dict[str, str]) -> None:
    """Ready: the VM's secret and its checkout are there."""
    from tests.provision.e2e_helpers import scoped_env

    assert scoped_env(guest, "~/work", "API_KEY") == values["API"], vm.name
    checkout = f"/home/{guest.user}/src/app/README.md"
    assert guest.run_root(["test", "-f", checkout]).returncode == 0, vm.name


async def _measure() -> list[tuple[str, str]]:
    from sand.provision import provision_base
    from tests.provision.e2e_helpers import endpoint, stand_in_agents
    from tests.rig.fixtures import guest_uses_mirror
    from tests.rig.gitserver import GitServer
    from tests.rig.guest import NetnsGuest, cleanup_stale
    from tests.rig.rootfs import ensure_rootfs
    from tests.rig.workbench import AptMirror, ensure_workbench

    cleanup_stale()
    bare, bench = ensure_rootfs(), ensure_workbench()
    guests: list[NetnsGuest] = []

    def start(layers: list[Path] | None = None) -> NetnsGuest:
        return start_guest(guests, bare, layers)

    server = GitServer(token="bench-git-token-not-secret").start()
    with tempfile.TemporaryDirectory() as tmp_name, AptMirror(bench.mirror) as mirror:
        tmp = Path(tmp_name)
        os.environ["SAND_AGENT_SOURCE"] = str(stand_in_agents(tmp / "agents"))
        os.environ.setdefault("SAND_STATE_DIR", str(tmp / "state"))
        spec = _spec(tmp)
        values = {**spec["values"], "GIT": server.token}
        vms = _ready_specs(spec, server.create_repo("app", {"README.md": "ready\n"}))

        try:
            # The base, built once (not counted): what the golden clone and the spare use.
            base_guest = start()
            guest_uses_mirror(base_guest, mirror)
            await provision_base(endpoint(base_guest, policy="none"), spec["base"])
            layer = base_guest.freeze()
            # Made beforehand: the pool's spare, and the fork's source (frozen: its disk
            # as the fork's snapshot holds it).
            spare = start([layer])
            await _provision(spare, vms["spare"], values)
            source = start([layer])
            await ready(source, vms["source"], values)
            snapshot = source.freeze()

            full_guest = start()
            guest_uses_mirror(full_guest, mirror)
            t = time.perf_counter()
            await ready(full_guest, vms["full"], values)
            t_full = time.perf_counter() - t

            t = time.perf_counter()
            clone = start([layer])
            t_clone = time.perf_counter() - t
            t = time.perf_counter()
            golden = await ready(clone, vms["golden"], values)
            t_golden = t_clone + time.perf_counter() - t

            t = time.perf_counter()
            claimed = await ready(spare, vms["claim"], values)
            t_claim = time.perf_counter() - t

            t = time.perf_counter()
            forked_guest = start([snapshot, layer])
            t_fork_start = time.perf_counter() - t
            t = time.perf_counter()
            forked = await ready(forked_guest, vms["fork"], values)
            t_fork = t_fork_start + time.perf_counter() - t
        finally:
            for g in guests:
                g.stop()
            server.stop()

    return four_ways(
        {"full": t_full, "golden": t_golden, "clone": t_clone, "claim": t_claim, "fork": t_fork},
        {
            "full": "bare Debian",
            "golden": "modelled clone + own steps",
            "claim": "rename not modelled + own steps",
            "fork": "modelled clone + own steps",
        },
        {"golden clone": golden, "warm claim": claimed, "fork": forked},
    )


def four_ways(
    t: dict[str, float], how: dict[str, str], reports: dict[str, Any]
) -> list[tuple[str, str]]:
    """The four times (``t``: full, golden, its clone part, claim, fork) and their ratios,
    each labelled with what its figure holds (``how``); the steps each of ``reports`` ran."""
    full, golden, clone, claim, fork = (t[k] for k in ("full", "golden", "clone", "claim", "fork"))
    return [
        (f"full provisioning ({how['full']})", f"{full:.2f} s"),
        (
            f"golden clone ({how['golden']})",
            f"{golden:.2f} s ({clone:.2f} s + {golden - clone:.2f} s); "
            f"{full / golden:.1f}x faster than full",
        ),
        (
            f"warm claim ({how['claim']})",
            f"{claim:.2f} s; {golden / claim:.1f}x faster than a golden clone "
            f"(goal ≥ 10x), {full / claim:.1f}x than full",
        ),
        (
            f"fork of a provisioned VM ({how['fork']})",
            f"{fork:.2f} s; {golden / fork:.2f}x a golden clone's speed (goal > 1x), "
            f"{full / fork:.1f}x faster than full",
        ),
        *((f"steps run, {name}", ", ".join(r.ran) or "none") for name, r in reports.items()),
    ]


if __name__ == "__main__":
    for key, value in rows():
        print(f"{key}: {value}")
