"""Kill `sand apply` with SIGKILL at every mutating step on the limactl
stand-in; the next apply must converge with zero duplicate and zero orphaned
instances (a golden base excepted, which is never a VM)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sand.state.journal import Journal
from tests.cli.helpers import run_sand
from tests.crash.killer import Record, intent, kill_when, sand_argv, step, wait_for_strays
from tests.limactl_standin import StandIn

Condition = Callable[[list[Record]], bool]

MANIFEST = """\
apiVersion: sand/v1
project: crash
backends:
  laptop: {{type: lima, lima_home: ./lima}}
defaults: {{image: debian-12, provision: false, disk: 20GiB, memory: 2GiB}}
vms:
{vms}
"""
TWO = "  - name: a\n  - name: b\n"


class Rig:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        self.manifest = root / "sand.yaml"
        self.journal = root / "state" / "projects" / "crash" / "journal.jsonl"

    def write(self, vms: str) -> None:
        self.manifest.write_text(MANIFEST.format(vms=vms))

    def env(self) -> dict[str, str]:
        env = {**os.environ, **self.standin.env(), "SAND_STATE_DIR": str(self.root / "state")}
        env.pop("LIMA_HOME", None)
        return env

    def sand(self, *args: str):
        # Only the runs to be killed need a process of their own (kill_at).
        return run_sand([*args, str(self.manifest)], cwd=self.root, env=self.env())

    def running(self, command: str, after: Condition) -> Condition:
        """``after`` holds and a ``limactl COMMAND`` begun since has been logged by the
        stand-in (it logs an invocation as it begins, then takes its configured delay):
        a kill now lands inside that command."""
        seen: list[int] = []  # how many there were when ``after`` first held

        def condition(records: list[Record]) -> bool:
            if not after(records):
                return False
            try:
                now = self.standin.commands().count(command)
            except ValueError:  # a log line being written
                return False
            if not seen:
                seen.append(now)
            return now > seen[0]

        return condition

    def vms(self) -> list[str]:
        return sorted(n for n in self.standin.instances() if not n.startswith("sand-base"))

    def kill_at(self, condition, delay: float = 0.0, *args: str, settle: bool = True) -> None:
        """Kill an apply at ``condition`` and, unless told not to, wait until what it left
        running (limactl in sessions of their own) has ended too."""
        killed = kill_when(
            sand_argv("apply", "--auto-approve", "--parallelism", "1", *args, str(self.manifest)),
            self.env(),
            self.root,
            self.journal,
            condition,
            delay=delay,
        )
        assert killed, "apply finished before the crash point"
        if settle:
            self.settle()
        assert Journal(self.journal).pending(), "the kill left no unfinished operation"

    def settle(self) -> None:
        # By sand's environment, which its children carry from the fork on.
        wait_for_strays(f"SAND_STATE_DIR={self.root / 'state'}")

    def assert_converged(self, expected: list[str], *args: str) -> None:
        proc = self.sand("apply", "--auto-approve", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert self.vms() == expected, f"duplicates or orphans: {self.standin.instances()}"
        proc = self.sand("plan", "--detailed-exitcode")
        assert proc.returncode == 0, proc.stdout + proc.stderr


POINTS: dict[str, Callable[[Rig], Condition]] = {
    "after the intent": lambda rig: intent("create"),
    "mid create (lima.yaml, the image not copied yet)": lambda rig: rig.running(
        "create", intent("create")
    ),
    "after the create": lambda rig: step("created"),
    "after the marker": lambda rig: step("marked"),
    "mid start": lambda rig: rig.running("start", step("marked")),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_crash_during_create_converges(point, tmp_path):
    rig = Rig(tmp_path)
    rig.standin.configure(create_delay=1.0, start_delay=1.0)
    rig.write(TWO)
    rig.kill_at(POINTS[point](rig))
    rig.standin.configure(create_delay=0.0, start_delay=0.0)
    rig.assert_converged(["a", "b"])


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_crash_mid_delete_converges(delay, tmp_path):
    rig = Rig(tmp_path)
    rig.write(TWO + "  - name: c\n")
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.standin.configure(delete_delay=1.0)
    rig.write(TWO)
    # The stand-in's instances have no guest to sweep for unpushed work.
    rig.kill_at(intent("delete"), delay, "--allow-data-loss")
    rig.standin.configure(delete_delay=0.0)
    # A delete killed before it began is planned again, and swept again: same flag.
    rig.assert_converged(["a", "b"], "--allow-data-loss")


def test_crash_mid_update_converges(tmp_path):
    rig = Rig(tmp_path)
    rig.write(TWO)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.standin.configure(start_delay=1.0)
    rig.write("  - name: a\n    cpus: 4\n  - name: b\n")
    rig.standin.clear_log()
    rig.kill_at(rig.running("start", intent("update")))  # the update's start is under way
    rig.standin.configure(start_delay=0.0)
    rig.assert_converged(["a", "b"])
    listed = {i["name"]: i for i in rig.standin.list_json()}
    assert listed["a"]["cpus"] == 4 and listed["a"]["status"] == "Running"


def test_crash_mid_stop_waits_for_the_orphaned_limactl(tmp_path):
    """`limactl stop` runs in its own session and outlives the killed sand. The next
    apply waits for it before reading the instance: otherwise the orphan's stop lands
    after the new run started the instance again, leaving it stopped but recorded as
    converged."""
    rig = Rig(tmp_path)
    rig.write(TWO)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.standin.configure(stop_delay=5.0)
    rig.write("  - name: a\n    cpus: 4\n  - name: b\n")
    rig.standin.clear_log()

    def stopping(records) -> bool:
        """The update's ``limactl stop`` is under way (logged as it begins; then it sleeps
        out its delay): a fixed time after the intent may come before it, under load."""
        if not intent("update")(records):
            return False
        try:
            return "stop" in rig.standin.commands()
        except ValueError:  # a log line being written
            return False

    rig.kill_at(stopping, 0.0, settle=False)  # the orphaned stop is the subject
    rig.standin.configure(stop_delay=0.0)  # the next run's own stop is quick
    proc = rig.sand("plan")
    assert "will recover: wait for limactl stop (pid" in proc.stdout, proc.stdout
    rig.assert_converged(["a", "b"])
    # Once the orphan has ended (no process of the killed run is left), the instance is
    # still as recorded: its late stop did not land on the new run's start.
    rig.settle()
    listed = {i["name"]: i for i in rig.standin.list_json()}
    assert listed["a"]["cpus"] == 4 and listed["a"]["status"] == "Running"
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0
