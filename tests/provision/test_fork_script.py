"""The guest's fork step, run for real: bash and git on this machine (issue 29,
item 2). Two forks of one source checkout each get their own branch fork/<vm> from
the source's HEAD, carrying its uncommitted and untracked work; a second run
changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sand.desired.fork import DesiredFork
from sand.desired.spec import DesiredRepo
from sand.provision.bundle import Bundle
from sand.provision.steps import fork_step, provision_steps
from tests.provision.helpers import make_vm
from tests.required import require

GIT = shutil.which("git") or "git"
SCRIPT = Bundle().root / "fork.sh"
REPO = DesiredRepo(name="app", url="file:///x", branch="main", path="~/src/app", token_secret=None)


@pytest.fixture(autouse=True)
def _git() -> None:
    require(shutil.which("git") is not None, "needs git")


def git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        [GIT, "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def source_home(root: Path) -> Path:
    """A source's home: a checkout with a commit, a staged change, an unstaged one and
    an untracked file (the agent's work in progress)."""
    home = root / "home" / "claude"
    app = home / "src" / "app"
    app.mkdir(parents=True)
    git(app, "init", "-q", "-b", "main")
    (app / "a.txt").write_text("one\n")
    (app / "b.txt").write_text("two\n")
    git(app, "add", "a.txt", "b.txt")
    git(app, "commit", "-q", "-m", "first")
    (app / "a.txt").write_text("one, staged\n")
    git(app, "add", "a.txt")
    (app / "b.txt").write_text("two, unstaged\n")
    (app / "new.txt").write_text("untracked\n")
    return home


def run_fork(
    home: Path, vm_name: str, logins: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    fork = DesiredFork("agent-1", logins=logins)
    vm = replace(make_vm(repos=(REPO,)), name=vm_name, fork=fork)
    step = fork_step(vm)
    assert step.argv[2:] == (f"fork/{vm_name}", vm_name, *logins)
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), *step.argv[2:]],
        input=step.stdin.decode(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_two_forks_each_get_their_own_branch_carrying_the_work(tmp_path: Path) -> None:
    source = source_home(tmp_path / "source")
    head = git(source / "src" / "app", "rev-parse", "HEAD")
    homes = {}
    for name in ("try-1", "try-2"):
        home = tmp_path / name / "home" / "claude"
        shutil.copytree(source, home, symlinks=True)  # the fork's copy of the source's disk
        proc = run_fork(home, name)
        assert proc.returncode == 0, proc.stderr
        homes[name] = home / "src" / "app"
    for name, app in homes.items():
        assert git(app, "branch", "--show-current") == f"fork/{name}"
        assert git(app, "rev-parse", "HEAD") == head  # from the source's HEAD
        assert git(app, "diff", "--cached", "--name-only") == "a.txt"
        assert git(app, "diff", "--name-only") == "b.txt"
        assert (app / "new.txt").read_text() == "untracked\n"
        assert (app / "b.txt").read_text() == "two, unstaged\n"
    # The source is not touched.
    assert git(source / "src" / "app", "branch", "--show-current") == "main"


def test_a_second_run_leaves_the_forks_own_work_alone(tmp_path: Path) -> None:
    home = source_home(tmp_path)
    app = home / "src" / "app"
    assert run_fork(home, "try-1").returncode == 0
    git(app, "commit", "-q", "-am", "the fork's own work")
    git(app, "checkout", "-q", "-b", "elsewhere")
    proc = run_fork(home, "try-1")
    assert proc.returncode == 0, proc.stderr
    assert git(app, "branch", "--show-current") == "elsewhere"
    assert "on fork/try-1" not in proc.stdout + proc.stderr


def test_a_path_without_a_commit_is_skipped(tmp_path: Path) -> None:
    home = tmp_path / "home" / "claude"
    (home / "src").mkdir(parents=True)
    proc = run_fork(home, "try-1")
    assert proc.returncode == 0, proc.stderr


def test_only_a_fork_runs_the_fork_step() -> None:
    vm = make_vm(repos=(REPO,))
    assert "fork" not in [s.name for s in provision_steps(vm, {})]
    forked = replace(vm, name="try-1", fork=DesiredFork("agent-1"))
    names = [s.name for s in provision_steps(forked, {})]
    assert names[-3:] == ["repos", "fork-identity", "fork"]


def plant_logins(home: Path) -> dict[str, Path]:
    """Each agent's login file as the agent writes it when a person logs in."""
    files = {
        "claude": home / ".claude" / ".credentials.json",
        "codex": home / ".codex" / "auth.json",
        "opencode": home / ".local" / "share" / "opencode" / "auth.json",
        "pi": home / ".pi" / "agent" / "auth.json",
    }
    for agent, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"token": "canary-{agent}"}}\n')
    return files


def test_a_fork_keeps_only_the_agent_logins_its_entry_grants(tmp_path: Path) -> None:
    home = source_home(tmp_path)
    files = plant_logins(home)
    proc = run_fork(home, "try-1", logins=("codex",))
    assert proc.returncode == 0, proc.stderr
    assert {a for a, f in files.items() if f.exists()} == {"codex"}
    removed = sorted(line for line in proc.stdout.splitlines() if "login removed" in line)
    assert [line.split()[1] for line in removed] == ["claude", "opencode", "pi"]
    assert (home / ".claude").is_dir()  # the agent's settings stay: only the login goes

    # A login made in the fork since is its own: a later run keeps it.
    files["claude"].write_text('{"token": "the fork\'s own"}\n')
    proc = run_fork(home, "try-1", logins=("codex",))
    assert proc.returncode == 0, proc.stderr
    assert files["claude"].exists() and "login removed" not in proc.stdout
    # A fork of that fork is made anew: it gets only what its own entry grants.
    proc = run_fork(home, "try-1-1")
    assert proc.returncode == 0, proc.stderr
    assert not [a for a, f in files.items() if f.exists()]
