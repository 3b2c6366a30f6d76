"""Time to a ready agent VM, four ways in one run, with real boots (full VMs under TCG):

    python bench/time_to_ready_boot.py      # needs root, qemu and the rig's qemu image

The same four ways and the same "ready" as ``time_to_ready.py`` (SSH answers, the VM's
secret delivered, its repository checked out from the rig's git server with a token; sand's
own provisioner, ``sand.provision``, over SSH), but every guest is a full VM with its own
kernel and systemd (``tests/rig/qemu.py``: ``qemu-system-x86_64 -accel tcg``), so the
boots and disks are real where ``time_to_ready.py`` models them. A time is the disk's copy,
the boot to SSH and sand's provisioning; checking that the VM is ready afterwards (the
rig's own SSH to a TCG guest) is not counted:

1. **full provisioning**: a guest booted from the rig's image, then all of sand's steps. The
   image already holds the workbench's packages (as a prepared template does), so apt
   downloads nothing here; ``time_to_ready.py`` shows what they add on bare Debian;
2. **golden clone**: the golden base built once (not counted) on a guest booted from the
   image, then powered off; a guest booted from a copy-on-write overlay of its disk (as a
   Lima instance's disk is an overlay of its base image), then the VM's own steps;
3. **warm claim**: a spare booted from the base and provisioned as a spare beforehand (a
   pool's spare is already running); then the claiming VM's provisioning on that guest: its
   hostname (the spare's own machine-id and host keys kept: ``pool-identity``), secrets,
   repo. The rename is not modelled (on PVE one config write). With ``bench/run.py
   --before REF`` the tree before's claim is timed too, on another spare made by it;
4. **fork**: a provisioned VM with its checkout, made beforehand and powered off (what the
   PVE snapshot or the Lima stop gives: a disk at rest, not counted); its disk copied (as
   ``limactl clone`` copies the instance's disk: here the qcow2 overlay over the base), a
   guest booted from the copy, then the fork's provisioning (its identity, secrets, its
   ``fork/<vm>`` branch).

Also printed: a claim on Lima, where ``limactl rename`` needs a stopped instance, so a claim
stops, renames and starts the spare: this run's claim plus one boot measured here.

Each boot is TCG on a shared machine: a minute or more, so this is left out of
``bench/run.py --quick``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core import before_tree  # noqa: E402
from bench.golden_bases import _provision, _spec  # noqa: E402
from bench.summary import record  # noqa: E402
from bench.time_to_ready import _ready_specs, assert_ready, four_ways  # noqa: E402

QEMU_TOOLS = ("qemu-system-x86_64", "qemu-img", "mkfs.ext4")


def rows() -> list[tuple[str, str]]:
    if os.geteuid() != 0 or any(shutil.which(tool) is None for tool in QEMU_TOOLS):
        return [("skipped", f"needs root and {', '.join(QEMU_TOOLS)} (as the qemu e2e tests)")]
    return asyncio.run(_measure())


async def _measure() -> list[tuple[str, str]]:
    from sand.provision import provision_base
    from tests.provision.e2e_helpers import endpoint, stand_in_agents
    from tests.rig.gitserver import GitServer
    from tests.rig.qemu import GUESTFWD_ADDRESS, QemuGuest, build_image, cleanup_stale_qemu

    cleanup_stale_qemu()
    build_image()
    guests: list[QemuGuest] = []
    server = GitServer(token="bench-git-token-not-secret", host="127.0.0.1").start()

    def boot(backing: Path | None = None) -> tuple[QemuGuest, float]:
        """A guest booted (from ``backing``, else the image) and the seconds to its SSH."""
        guest = QemuGuest(backing=backing, guestfwds=[(80, "127.0.0.1", server.port)])
        guests.append(guest)
        t = time.perf_counter()
        guest.start()
        return guest, time.perf_counter() - t

    async def ready(guest: QemuGuest, vm: Any) -> tuple[Any, float]:
        """``vm`` provisioned on ``guest``, and the seconds that took; then checked ready
        (over SSH to a TCG guest: seconds that are the rig's, not counted)."""
        t = time.perf_counter()
        report = await _provision(guest, vm, values)
        took = time.perf_counter() - t
        repin(guest, report)
        assert_ready(guest, vm, values)
        return report, took

    def done(guest: QemuGuest) -> None:
        """Stopped once measured: an idle TCG guest still costs the others CPU."""
        guest.stop()
        guests.remove(guest)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["SAND_AGENT_SOURCE"] = str(stand_in_agents(tmp / "agents"))
        os.environ.setdefault("SAND_STATE_DIR", str(tmp / "state"))
        spec = _spec(tmp)
        values = {**spec["values"], "GIT": server.token}
        server.create_repo("app", {"README.md": "ready\n"})
        vms = _ready_specs(spec, f"http://{GUESTFWD_ADDRESS}/app.git")
        try:
            # Made beforehand, not counted: the base (powered off: its disk is the
            # golden image), and the fork's source, provisioned with its checkout and
            # powered off (its disk as the fork's snapshot holds it).
            base_guest, _ = boot()
            await provision_base(endpoint(base_guest, policy="none"), spec["base"])
            base = base_guest.freeze()
            source, _ = boot(base)
            await ready(source, vms["source"])
            source_disk = source.freeze()

            full_guest, t_full_boot = boot()
            _, t = await ready(full_guest, vms["full"])
            t_full = t_full_boot + t
            done(full_guest)

            clone, t_clone = boot(base)
            golden, t = await ready(clone, vms["golden"])
            t_golden = t_clone + t
            done(clone)

            # The pool's spare, booted and provisioned beforehand (not counted).
            spare, _ = boot(base)
            repin(spare, await _provision(spare, vms["spare"], values))
            claimed, t_claim = await ready(spare, vms["claim"])
            done(spare)
            t_claim_before, before_steps = None, {}
            if before_tree() is not None:
                # The tree before's claim, on a spare of its own made as it made them.
                spare, _ = boot(base)
                t_claim_before, before_steps = _claim_by_before(spare, server.token)
                spare.pin_new_host_key()
                assert_ready(spare, vms["claim"], values)
                done(spare)

            t = time.perf_counter()
            copy = tmp / "fork-disk.qcow2"
            shutil.copyfile(source_disk, copy)
            t_copy = time.perf_counter() - t
            copy_mb = copy.stat().st_size / 1e6
            forked_guest, t_fork_boot = boot(copy)
            forked, t = await ready(forked_guest, vms["fork"])
            t_fork = t_copy + t_fork_boot + t
            done(forked_guest)
        finally:
            for g in guests:
                g.stop()
            server.stop()

    record(
        "warm claim under TCG (own steps on a running spare)",
        t_claim,
        "s",
        baseline=("golden clone", t_golden),
        before=t_claim_before,
        goal="≥ 4x faster than a golden clone (≤ 0.25x)",
    )
    out = four_ways(
        {"full": t_full, "golden": t_golden, "clone": t_clone, "claim": t_claim, "fork": t_fork},
        {
            "full": f"real boot {t_full_boot:.1f} s + all steps, packages in the image",
            "golden": "real overlay + boot, then own steps",
            "claim": "on a running spare; rename not modelled"
            + (f"; the tree before's: {t_claim_before:.2f} s" if t_claim_before else ""),
            "fork": f"disk copy {t_copy * 1000:.0f} ms ({copy_mb:.0f} MB) + real boot "
            f"{t_fork_boot:.1f} s, then own steps",
        },
        {"golden clone": golden, "warm claim": claimed, "fork": forked},
    )
    # The boot alone, which tests/e2e/test_rig_qemu.py used to hold to a time limit: a
    # speed, not a behaviour, so measured here.
    out.insert(
        0,
        (
            "boot to SSH under TCG (a fresh guest from the rig's image; from a golden overlay)",
            f"{t_full_boot:.1f} s; {t_clone:.1f} s",
        ),
    )
    # Each claim's steps as the guest timed them: the load moves a TCG guest's figures
    # between runs and within one, a step beside its counterpart less.
    steps = [f"{s.name} {s.seconds:.1f} s" for s in claimed.steps if s.ran and s.seconds]
    then = [f"{name} {seconds:.1f} s" for name, seconds in before_steps.items() if seconds]
    out.insert(
        4,
        (
            "warm claim's steps (as the guest timed them)",
            ", ".join(steps) + (f"; the tree before's: {', '.join(then)}" if then else ""),
        ),
    )
    lima = t_claim + t_clone
    out.insert(
        6,
        (
            "warm claim on Lima (claim + one boot: rename needs a stopped instance)",
            f"{lima:.2f} s (this claim + the golden clone's boot); "
            f"{t_golden / lima:.2f}x a golden clone's speed",
        ),
    )
    return out


def repin(guest: Any, report: Any) -> None:
    """The rig's own SSH pins the guest's key: pinned anew when a step made new ones."""
    if any("SSH host keys made anew" in change for change in report.changes):
        guest.pin_new_host_key()


# The tree before (``bench/run.py --before``), its own sand and bench, in a process of its
# own: the spare provisioned as it provisions one, then its claim, timed.
_BEFORE_CLAIM = """
import asyncio, json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {tree!r})
from bench.golden_bases import _provision, _spec
from bench.time_to_ready import _ready_specs
from tests.rig.qemu import GUESTFWD_ADDRESS
class Guest: pass
g = Guest()
g.address, g.port, g.user, g.id, g.client_key_path = {where!r}
spec = _spec(Path(tempfile.mkdtemp()))
values = {{**spec["values"], "GIT": {token!r}}}
vms = _ready_specs(spec, f"http://{{GUESTFWD_ADDRESS}}/app.git")
async def main():
    await _provision(g, vms["spare"], values)
    t = time.perf_counter()
    report = await _provision(g, vms["claim"], values)
    took = time.perf_counter() - t
    print(json.dumps([took, {{s.name: s.seconds for s in report.steps if s.ran}}]))
asyncio.run(main())
"""


def _claim_by_before(guest: Any, token: str) -> tuple[float, dict[str, float]]:
    """The seconds the tree before's claim took on ``guest``, a spare booted for it, and
    each step's that ran (as the guest timed it)."""
    tree = before_tree()
    where = (guest.address, guest.port, guest.user, guest.id, str(guest.client_key_path))
    probe = _BEFORE_CLAIM.format(tree=tree, where=where, token=token)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tree, check=True
    )
    took, steps = json.loads(out.stdout.strip().splitlines()[-1])
    return float(took), {str(k): float(v) for k, v in steps.items()}


if __name__ == "__main__":
    for key, value in rows():
        print(f"{key}: {value}")
