"""Warm pools on Lima, with the limactl stand-in (issue 29, item 4): a claim stops
the spare, renames it (``limactl rename`` refuses a running instance) and starts it
under the new VM's name, its marker rewritten: no clone, no create. The slot is
refilled in the same apply; a kill mid-claim leaves the spare or the claimed VM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.crash.killer import intent, kill_when, wait_for_strays
from tests.limactl_standin import StandIn
from tests.machine_schemas import validate

MANIFEST = """\
apiVersion: sand/v1
project: pooltest
backends:
  laptop:
    type: lima
    lima_home: ./lima
pools:
  agents: {{warm: {warm}}}
defaults:
  image: debian-12
  provision: false
  disk: 20GiB
  memory: 2GiB
vms:
{vms}
"""
AGENT = "  - name: agent-4\n    pool: agents\n"


class Cli:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        self.standin.configure(require_tty_false=True, host_user="claude")
        self.manifest = root / "sand.yaml"

    def write(self, vms: str = "  []\n", warm: int = 2) -> None:
        body = MANIFEST.format(vms=vms, warm=warm).replace("vms:\n  []\n", "vms: []\n")
        self.manifest.write_text(body)

    def env(self) -> dict[str, str]:
        env = {**self.standin.env(), "SAND_STATE_DIR": str(self.root / "state")}
        env.pop("LIMA_HOME")  # the manifest says where
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "sand", *args, str(self.manifest)]

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
        )

    def vms(self) -> list[str]:
        """The instances, but sand's clone source (``sand-base-*``)."""
        return [n for n in self.standin.instances() if not n.startswith("sand-base-")]

    def marker(self, name: str) -> dict[str, object]:
        return json.loads((self.standin.instance_dir(name) / "sand-marker.json").read_text())


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    made = Cli(tmp_path)
    made.write()
    proc = made.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert made.vms() == ["agents-spare-1", "agents-spare-2"]
    assert made.marker("agents-spare-1")["pool"] == "agents"
    return made


def _operands(argv: tuple[str, ...], command: str) -> list[str]:
    """The words after ``command`` that are not flags, and a create's ``--name``."""
    words = argv[argv.index(command) + 1 :]
    named = [w.removeprefix("--name=") for w in words if w.startswith("--name=")]
    return [w for w in words if not w.startswith("-")] + named


def _settled(cli: Cli) -> None:
    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_claim_renames_the_spare_and_the_pool_refills(cli: Cli) -> None:
    uid = cli.marker("agents-spare-1")["uid"]
    cli.write(AGENT)
    plan = cli.sand("plan")
    assert '+ vm "agent-4" (claims spare agents-spare-1 of pool agents) {' in plan.stdout
    assert '+ spare "agents-spare-1" of pool agents (refill 1/2) {' in plan.stdout
    cli.standin.clear_log()
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cli.vms() == ["agent-4", "agents-spare-1", "agents-spare-2"]
    claimed = cli.marker("agent-4")
    assert claimed["uid"] == uid and claimed["name"] == claimed["identity"] == "agent-4"
    assert "pool" not in claimed
    assert cli.marker("agents-spare-1")["uid"] != uid  # a new spare in its slot
    made = [
        (i.command, _operands(i.argv, i.command))
        for i in cli.standin.invocations()
        if i.command in ("create", "clone", "rename") and "--list-templates" not in i.argv
    ]
    assert [ops for cmd, ops in made if cmd == "rename"] == [["agents-spare-1", "agent-4"]]
    # One new instance: the refill's; the claimed one was renamed, never made.
    assert [ops[-1] for cmd, ops in made if cmd != "rename"] == ["agents-spare-1"]
    _settled(cli)


def test_status_shows_the_spare_a_claim_will_take_as_it_is_and_claimed(cli: Cli) -> None:
    """Before the apply, the spare agent-4 will claim is there, running and ready: status
    says so and who claims it, not "absent" and unhealthy (the plan's change under its
    name is its slot's refill, a create)."""
    identity = cli.standin.list_json("agents-spare-1")[0]["name"]
    cli.write(AGENT)
    proc = cli.sand("status", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    validate("status", data)
    rows = {r["vm"]: r for r in data["vms"]}
    spare = rows["agents-spare-1"]
    assert spare["claimed_by"] == "agent-4"
    assert spare["identity"] == identity
    assert spare["observed"]["power"] == "running"
    assert spare["conditions"]["Healthy"] is True
    assert spare["action"] == "create"  # the refill, after the claim
    assert spare["reasons"] == ["refills the slot of agents-spare-1, claimed by agent-4"]
    # The claiming VM is not there yet under its name; the other spare is as it was.
    assert rows["agent-4"]["observed"] is None and "claimed_by" not in rows["agent-4"]
    assert "claimed_by" not in rows["agents-spare-2"]
    text = cli.sand("status")
    line = next(x for x in text.stdout.splitlines() if x.startswith("agents-spare-1 "))
    assert " running " in line and "absent" not in line, text.stdout
    assert (
        "agents-spare-1: claimed by agent-4: the next apply renames it agent-4 and refills "
        "its slot\n" in text.stdout
    )


@pytest.mark.parametrize("slow", ["stop_delay", "clone_delay"])
def test_a_kill_mid_claim_leaves_the_spare_or_the_claimed_vm(cli: Cli, slow: str) -> None:
    cli.write(AGENT)
    journal = cli.root / "state" / "projects" / "pooltest" / "journal.jsonl"
    # Killed while the spare stops, or while limactl moves its files (rename shares
    # clone's code, and its window without lima.yaml).
    cli.standin.configure(**{slow: 1.5})
    killed = kill_when(
        cli.argv("apply", "--auto-approve"),
        cli.env(),
        cli.root,
        journal,
        intent("rename"),
        delay=0.5,
    )
    assert killed, "apply finished before the claim"
    # limactl, started in a session of its own, outlives sand: let it end first.
    wait_for_strays(f"SAND_STATE_DIR={cli.root / 'state'}")
    names = set(cli.vms())
    # Never both, never neither.
    assert len(names & {"agent-4", "agents-spare-1"}) == 1, names
    cli.standin.configure(**{slow: 0.0})
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cli.vms() == ["agent-4", "agents-spare-1", "agents-spare-2"]
    _settled(cli)
