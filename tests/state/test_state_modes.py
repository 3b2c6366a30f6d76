"""sand's host state is 0600 files in 0700 directories whatever the umask, and
a looser one found there (an older sand, a restore, a hand edit) is tightened.

Each state file is made by the code that makes it in a real run, under umask
0 (and 0777, the umask that strips even the owner's bits), then every file
and directory under the state dir is checked on disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from sand.apply.engine import ApplyResult, VMResult
from sand.guest.ssh import KnownHosts
from sand.state.journal import Journal
from sand.state.lock import ProjectLock
from sand.state.paths import project_dir, state_root
from sand.state.records import load_records, record_results
from sand.verbs.ledger import append as ledger_append
from sand.verbs.ledger import ledger_path
from tests.limactl_standin import StandIn


@pytest.fixture(params=[0o000, 0o777], ids=["umask0", "umask777"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def modes_under(root: Path) -> dict[str, int]:
    """Path (relative) → mode of everything under ``root``, ``root`` included."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def assert_private(root: Path) -> None:
    wrong = {
        path: f"{mode:04o}"
        for path, mode in modes_under(root).items()
        if mode != (0o700 if (root / path).is_dir() else 0o600)
    }
    assert wrong == {}


def test_every_state_file_is_private_whatever_the_umask(state: Path, umask: int) -> None:
    journal = Journal(project_dir("demo") / "journal.jsonl")
    for i in range(3):
        journal.finish(journal.begin("create", backend="pve", vm=f"v{i}", identity=str(i)))
    journal.begin("create", backend="pve", vm="open", identity="9")
    journal.compact()  # rewrites the file: the mode must survive it
    assert len((project_dir("demo") / "journal.jsonl").read_text().splitlines()) == 1
    with ProjectLock(project_dir("demo") / "lock"):
        pass
    result = ApplyResult([VMResult("dev", "laptop", "create", ok=False, error="boom")])
    record_results("demo", result.results)
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    assert KnownHosts().pin("lima-dev.1", key)
    ledger_append(ledger_path("demo"), [{"vm": "dev", "event": "swept"}])

    names = set(modes_under(state))
    for made in (
        "known_hosts", "known_hosts.lock", "projects/demo/journal.jsonl", "projects/demo/lock",
        "projects/demo/last-apply.json", "projects/demo/landing.jsonl",
    ):  # fmt: skip
        assert made in names
    assert_private(state)


def test_looser_state_dirs_and_files_are_tightened(state: Path) -> None:
    (state / "projects" / "demo").mkdir(parents=True)
    for d in (state, state / "projects", state / "projects" / "demo"):
        d.chmod(0o755)
    journal_file = state / "projects" / "demo" / "journal.jsonl"
    journal_file.write_text("")
    journal_file.chmod(0o644)
    records = state / "projects" / "demo" / "last-apply.json"
    records.write_text("{}")
    records.chmod(0o644)
    known = state / "known_hosts"
    known.write_text("")
    known.chmod(0o666)

    assert state_root() == state and project_dir("demo") == state / "projects" / "demo"
    for d in (state, state / "projects", state / "projects" / "demo"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    Journal(journal_file).begin("create", backend="pve", vm="a", identity="1")
    load_records("demo")
    KnownHosts().keys("lima-dev.1")
    assert_private(state)


def test_an_existing_poisoned_record_is_not_replayed(state: Path) -> None:
    path = project_dir("demo") / "last-apply.json"
    hostile = "guest step 'repos' failed\n\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\rApply complete!"
    path.write_text(json.dumps({"dev": {"error": hostile, "ok": False, "tags": ["\x9b2J"]}}))
    loaded = load_records("demo")
    assert loaded["dev"]["error"] == "guest step 'repos' failed\n\nApply complete!"
    assert loaded["dev"]["tags"] == [""]


def test_a_real_run_under_umask_0_leaves_only_private_state(tmp_path: Path) -> None:
    """`sand apply` and `sand plan --out` as a person runs them (the limactl
    stand-in as the backend), in a process whose umask is 0."""
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    (tmp_path / "sand.yaml").write_text(
        "apiVersion: sand/v1\nproject: modes\n"
        "backends:\n  laptop: {type: lima, lima_home: ./lima}\n"
        "defaults: {image: debian-12, provision: false, disk: 20GiB, memory: 2GiB}\n"
        "vms:\n  - name: a\n  - name: b\n"
    )
    env = {**standin.env(), "SAND_STATE_DIR": str(tmp_path / "state")}
    env.pop("LIMA_HOME")

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, umask=0,
        )  # fmt: skip

    res = sand("apply", "--auto-approve")
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "old.plan").write_text("{}")
    (tmp_path / "old.plan").chmod(0o644)
    res = sand("plan", "--out", "old.plan")
    assert res.returncode == 0, res.stdout + res.stderr
    assert stat.S_IMODE((tmp_path / "old.plan").stat().st_mode) == 0o600
    assert json.loads((tmp_path / "old.plan").read_text())["format"] == "sand-plan/v1"
    assert (tmp_path / "state" / "projects" / "modes" / "journal.jsonl").exists()
    assert (tmp_path / "state" / "projects" / "modes" / "last-apply.json").exists()
    assert_private(tmp_path / "state")


def test_the_remote_lima_key_copy_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    from sand.backends.lima import LimaBackend
    from sand.backends.lima.guest import local_key
    from sand.backends.lima.runner import LocalRunner

    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    remote_key = tmp_path / "remote-id"
    os.umask(0o022)
    remote_key.write_text("not really a key\n")
    os.umask(umask)

    class RemoteLike(LocalRunner):
        remote = True

    runner = RemoteLike(backend="buildbox", lima_home=None)
    backend = LimaBackend("buildbox", project="demo", runner=runner)
    local = Path(asyncio.run(local_key(backend.ctx, str(remote_key))))
    assert local.parent == tmp_path / "state" / "projects" / "demo" / "lima-keys"
    assert local.read_text() == "not really a key\n"
    assert_private(tmp_path / "state")
