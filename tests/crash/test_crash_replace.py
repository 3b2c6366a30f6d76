"""Kill a create-before-destroy replace after every journal record it writes, on fakepve
and on the limactl stand-in; the next apply must end with exactly one VM of that name,
and the person's VM is never lost: the original, or the replacement the killed run made,
survives. A replacement may be thrown away only while the original still stands (and a
new replace then makes its replacement before the original goes).

The sweep is driven by what an uninterrupted replace journals (measured first), so a
new step in the replace is covered without touching this test.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sand.state.journal import Journal
from tests.cli.helpers import Sand, run_sand
from tests.crash.killer import (
    Record,
    env_for,
    journal_records,
    kill_when,
    sand_argv,
    wait_for_strays,
)
from tests.limactl_standin import StandIn

GO = ("apply", "--auto-approve", "--allow-data-loss")


@dataclass
class Seen:
    """One VM as the test tells VMs apart: a PVE vmid, a Lima sidecar uid."""

    key: str
    name: str


class World:
    """What each backend's sweep needs: write the manifest for an image, run sand, list
    VMs, and say (from the far side's own log) in which order this run created and
    deleted VMs."""

    journal: Path
    images: tuple[str, str]  # two images: each flip is a replace

    def write(self, image: str) -> None: ...
    def sand(self, *args: str) -> subprocess.CompletedProcess[str]: ...
    def argv(self) -> tuple[list[str], dict[str, str], Path]: ...
    def vms(self) -> list[Seen]: ...
    def clear_log(self) -> None: ...
    def made_before_deleted(self, old: Seen) -> bool: ...
    def settle(self) -> None:
        """Wait for what the killed run left running on the far side to end."""


class Pve(World):
    images = ("debian-13", "debian-13-next")  # templates 9000 and 9001

    def __init__(self, tmp_path: Path, rig) -> None:
        self.rig, self.sand_ = rig, Sand(tmp_path)
        self.root = tmp_path
        self.kept: list[object] = []
        rig.seed_vm(
            9001, self.images[1], template=True, status="stopped", disk=4 << 30,
            memory_mib=1024, cores=1,
        )  # fmt: skip
        self.journal = self.sand_.state_dir / "projects" / "demo" / "journal.jsonl"

    def write(self, image: str) -> None:
        vm: dict[str, object] = {"name": "agent-1", "memory": "2GiB"}
        if image != self.images[0]:
            vm["image"] = image
        self.sand_.write(self.rig.manifest([vm]))

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.sand_.run(*args)

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        return sand_argv(*GO), env_for(self.sand_.state_dir), self.root

    def vms(self) -> list[Seen]:
        # By VM object, not vmid: PVE hands a deleted VM's id to the next clone. The
        # objects seen are kept, so no id() is reused within the test.
        found = self.rig.vms()
        self.kept.extend(found)
        return [Seen(f"{v.vmid}/{id(v)}", v.name or "") for v in found]

    def clear_log(self) -> None:
        self.rig.clear_log()

    def made_before_deleted(self, old: Seen) -> bool:
        log = self.rig.log
        made = [i for i, r in enumerate(log) if r.method == "POST" and r.path.endswith("/clone")]
        gone = [
            i for i, r in enumerate(log)
            if r.method == "DELETE" and r.path.endswith(f"/qemu/{old.key.split('/')[0]}")
        ]  # fmt: skip
        return bool(made) and (not gone or made[0] < gone[0])


LIMA_MANIFEST = """\
apiVersion: sand/v1
project: crash
backends:
  laptop: {{type: lima, lima_home: ./lima}}
defaults: {{provision: false, disk: 20GiB, memory: 2GiB}}
vms:
  - name: agent-1
    image: {image}
"""


class Lima(World):
    images = ("debian-12", "debian-13")

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
        self.manifest = tmp_path / "sand.yaml"
        self.journal = tmp_path / "state" / "projects" / "crash" / "journal.jsonl"

    def write(self, image: str) -> None:
        self.manifest.write_text(LIMA_MANIFEST.format(image=image))

    def env(self) -> dict[str, str]:
        env = {**os.environ, **self.standin.env(), "SAND_STATE_DIR": str(self.root / "state")}
        env.pop("LIMA_HOME", None)
        return env

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        # Only the runs to be killed need a process of their own (argv, kill_when).
        return run_sand([*args, str(self.manifest)], cwd=self.root, env=self.env())

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        return sand_argv(*GO, str(self.manifest)), self.env(), self.root

    def vms(self) -> list[Seen]:
        out = []
        for name in self.standin.instances():
            if name.startswith("sand-"):
                continue  # bases and sand's own objects are never the person's VM
            out.append(Seen(self._uid(name) or f"unmarked:{name}", name))
        return out

    def _uid(self, name: str) -> str:
        try:
            marker = (self.standin.instance_dir(name) / "sand-marker.json").read_text()
            return str(json.loads(marker).get("uid", ""))
        except (OSError, ValueError):
            return ""  # not written yet, or cut short by the kill

    def clear_log(self) -> None:
        self.standin.clear_log()

    def settle(self) -> None:
        # The limactl children of the killed sand run on in sessions of their own; they
        # carry sand's environment from the fork on.
        wait_for_strays(f"SAND_STATE_DIR={self.root / 'state'}")

    def made_before_deleted(self, old: Seen) -> bool:
        calls = [(i.command, i.argv) for i in self.standin.invocations()]
        made = [n for n, (c, _) in enumerate(calls) if c in ("create", "clone")]
        gone = [n for n, (c, argv) in enumerate(calls) if c == "delete" and old.name in argv]
        return bool(made) and (not gone or made[0] < gone[0])


def records_of_a_replace(world: World, image: str) -> list[Record]:
    """Every journal record an uninterrupted replace writes (read while it runs: a clean
    run compacts its journal at the end)."""
    seen: list[Record] = []

    def watch(records: list[Record]) -> bool:
        if len(records) > len(seen):
            seen[:] = records
        return False

    world.write(image)
    argv, env, cwd = world.argv()
    base = len(journal_records(world.journal))
    assert not kill_when(argv, env, cwd, world.journal, watch)
    return seen[base:]


def sweep(world: World) -> None:
    world.write(world.images[0])
    first = world.sand(*GO)
    assert first.returncode == 0, first.stdout + first.stderr
    records = records_of_a_replace(world, world.images[1])
    assert any(r.get("step") == "deleting-old" for r in records), records
    current = 0  # which image agent-1 has now
    for k in range(1, len(records) + 1):
        (old,) = world.vms()
        current = 1 - current
        world.write(world.images[current])
        base = len(journal_records(world.journal))
        argv, env, cwd = world.argv()
        at: Callable[[list[Record]], bool] = lambda rs, n=base + k: len(rs) >= n  # noqa: E731
        if not kill_when(argv, env, cwd, world.journal, at):
            continue  # the run finished first: nothing was interrupted
        world.settle()
        after_kill = world.vms()
        old_stands = any(v.key == old.key for v in after_kill)
        made = [v for v in after_kill if v.key != old.key]  # what the killed run made
        world.clear_log()
        again = world.sand(*GO)
        assert again.returncode == 0, f"after record {k}: {again.stdout}{again.stderr}"
        final = world.vms()
        assert [v.name for v in final] == ["agent-1"], f"after record {k}: {final}"
        (survivor,) = final
        what = f"killed after record {k} ({records[k - 1]}): old {old}, made {made}"
        if survivor.key in {m.key for m in made} or survivor.key == old.key:
            continue  # the replacement the killed run made, or the original, survived
        # A third VM: allowed only if the original stood after the kill and the new run
        # replaced it (made its successor before deleting it), never a blank create.
        assert old_stands, f"the original and its replacement were both lost: {what}"
        assert "will be created" not in again.stdout, f"a blank VM was made: {what}"
        assert "must be replaced" in again.stdout, f"{what}: {again.stdout}"
        assert world.made_before_deleted(old), f"the original went before its successor: {what}"
    assert not Journal(world.journal).pending()
    plan = world.sand("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr


def test_a_kill_at_every_step_of_a_replace_on_proxmox(tmp_path, fakepve_server) -> None:
    sweep(Pve(tmp_path, fakepve_server))


def test_a_kill_at_every_step_of_a_replace_on_lima(tmp_path) -> None:
    sweep(Lima(tmp_path))
