"""`sand apply` / `sand plan` as a person runs them, with the stand-in first on PATH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.limactl_standin import StandIn

MANIFEST = """\
apiVersion: sand/v1
project: clitest
backends:
  laptop:
    type: lima
    lima_home: ./lima
defaults:
  image: debian-12
  provision: false
  disk: 20GiB
  memory: 2GiB
vms:
{vms}
"""
THREE = """\
  - name: a
    protect: true
  - name: b
    ports: [{guest: 3000, host: 13000}]
  - name: c
    state: stopped
"""


class Cli:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        self.standin.configure(require_tty_false=True, host_user="claude")
        self.manifest = root / "sand.yaml"

    def write(self, vms: str) -> None:
        self.manifest.write_text(MANIFEST.format(vms=vms))

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.standin.env(), "SAND_STATE_DIR": str(self.root / "state")}
        env.pop("LIMA_HOME")  # the manifest says where
        return subprocess.run(
            [sys.executable, "-m", "sand", *args, str(self.manifest)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
        )


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_apply_then_no_changes_with_one_listing(cli: Cli) -> None:
    cli.write(THREE)
    res = cli.sand("apply", "--auto-approve")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 added" in res.stdout
    assert cli.standin.instances() == ["a", "b", "c"]  # each made from its image, no base
    listed = {i["name"]: i for i in cli.standin.list_json()}
    assert listed["a"]["status"] == "Running" and listed["a"]["protected"]
    assert listed["c"]["status"] == "Stopped"

    cli.standin.clear_log()
    res = cli.sand("plan", "--detailed-exitcode")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No changes" in res.stdout
    assert [c for c in cli.standin.commands() if c] == ["list"]
    assert all(i.tty_false for i in cli.standin.invocations())


def test_prune_spares_protected_and_foreign_instances(cli: Cli) -> None:
    cli.write(THREE)
    assert cli.sand("apply", "--auto-approve").returncode == 0
    cli.standin.make_instance("human", {"cpus": 1})
    cli.write("  - name: c\n    state: stopped\n")
    # No guest behind it to sweep: the guard is tested in test_guard.py.
    res = cli.sand("apply", "--auto-approve", "--allow-data-loss")
    # b is pruned; protected a is kept and reported blocked, so not converged: exit 1.
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Not converged: a blocked." in res.stderr
    names = set(cli.standin.instances())
    assert "b" not in names  # pruned
    assert {"a", "c", "human"} <= names  # protected, kept, not ours


def test_an_untrusted_listing_changes_nothing(cli: Cli) -> None:
    cli.write(THREE)
    assert cli.sand("apply", "--auto-approve").returncode == 0
    (cli.standin.lima_home / "being-cloned").mkdir()
    cli.write("  - name: d\n")  # would create d and prune b, c
    cli.standin.clear_log()
    res = cli.sand("apply", "--auto-approve")
    assert "being-cloned" in res.stdout + res.stderr
    cmds = cli.standin.commands()
    assert not {"create", "clone", "delete", "stop", "edit", "start"} & set(cmds), cmds
    assert {"b", "c"} <= set(cli.standin.instances())


def test_a_hand_edited_mount_is_planned_as_drift(cli: Cli) -> None:
    cli.write("  - name: b\n")
    assert cli.sand("apply", "--auto-approve").returncode == 0
    y = cli.standin.read_yaml("b")
    y["mounts"] = [{"location": "/", "writable": True}]
    cli.standin.write_yaml("b", y)
    res = cli.sand("plan", "--json", "--allow-data-loss")  # no guest to sweep, as below
    assert res.returncode in (0, 2), res.stderr
    plan = json.loads(res.stdout)
    text = json.dumps(plan)
    assert "writable host mount" in text
    # No guest behind it to sweep: the guard is tested in test_guard.py.
    res = cli.sand("apply", "--auto-approve", "--allow-data-loss")
    assert res.returncode == 0, res.stdout + res.stderr
    assert cli.standin.read_yaml("b")["mounts"] == []  # replaced with a clean instance
