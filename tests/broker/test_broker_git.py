"""The broker between a real git and the rig's token-protected HTTPS git server.

git on this host plays the guest: it reaches the broker with a VM's broker
credential, the broker reaches the server with the real token. What is proven is
on the far side: the server's branches, its request log, the broker's operations
log, and what git printed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sand.audit.log import LOG_FILE
from sand.broker.server import BrokerServer, BrokerState
from sand.desired.brokered import BrokerGrant
from tests.audit.helpers import audit_records, verify_host
from tests.rig.brokerrig import start_broker
from tests.rig.gitserver import GitServer
from tests.rig.tlscert import self_signed

CREDENTIAL = "vm-credential-5f1e0c3a9b7d"
TOKEN = "rig-brokerCanary-93be1f07c2d4"


@dataclass
class Rig:
    server: GitServer
    broker: BrokerServer
    state: BrokerState
    home: Path

    @property
    def broker_url(self) -> str:
        return f"http://127.0.0.1:{self.broker.server_address[1]}"

    def git(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
        }
        return subprocess.run(
            ["git", *args],
            cwd=cwd or self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def operations(self) -> list[dict[str, object]]:
        path = self.state.directory / "operations.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    cert, key = self_signed(tmp_path, "127.0.0.1")
    server = GitServer(TOKEN, host="127.0.0.1", tls=(cert, key)).start()
    project = server.create_repo("project", {"README.md": "brokered\n"})
    server.create_repo("other")
    grant = BrokerGrant("GH_TOKEN", (project,), ("agent/*",))
    broker = start_broker(tmp_path / "broker", "dev-1", CREDENTIAL, grant, TOKEN, cert)
    state = broker.state
    home = tmp_path / "home"
    home.mkdir()
    (home / "credential").write_text(CREDENTIAL + "\n")
    upstream = server.base_url
    rig = Rig(server, broker, state, home)
    # What the secrets step writes in a guest: git goes to the broker for the host.
    helper = f"!f() {{ echo username=x; printf 'password=%s\\n' \"$(cat {home}/credential)\"; }}; f"
    (home / ".gitconfig").write_text(
        f'[url "{rig.broker_url}/{upstream.removeprefix("https://")}/"]\n'
        f"\tinsteadOf = {upstream}/\n"
        f'[credential "{rig.broker_url}"]\n\thelper = {json.dumps(helper)}\n'
        "[user]\n\tname = agent\n\temail = agent@sand.invalid\n"
    )
    try:
        yield rig
    finally:
        broker.shutdown()
        broker.server_close()
        server.stop()


def test_clone_fetch_and_push_to_an_allowed_branch_go_through(rig: Rig) -> None:
    url = rig.server.url_for("project")
    clone = rig.git("clone", "-q", url, "project")
    assert clone.returncode == 0, clone.stderr
    work = rig.home / "project"
    assert (work / "README.md").read_text() == "brokered\n"
    assert rig.git("fetch", "-q", "origin", cwd=work).returncode == 0
    rig.git("checkout", "-q", "-b", "agent/fix", cwd=work)
    (work / "fix.txt").write_text("fixed\n")
    rig.git("add", "fix.txt", cwd=work)
    rig.git("commit", "-qm", "fix", cwd=work)
    push = rig.git("push", "-q", "origin", "agent/fix", cwd=work)
    assert push.returncode == 0, push.stderr
    head = rig.git("rev-parse", "HEAD", cwd=work).stdout.strip()
    assert rig.server.branches("project")["agent/fix"] == head
    ops = rig.operations()
    assert {(o["service"], o["allowed"]) for o in ops} == {
        ("git-upload-pack", True),
        ("git-receive-pack", True),
    }
    assert ["refs/heads/agent/fix"] in [o.get("refs") for o in ops]


def test_a_push_to_the_default_branch_is_refused_with_a_reason_git_prints(rig: Rig) -> None:
    url = rig.server.url_for("project")
    assert rig.git("clone", "-q", url, "project").returncode == 0
    work = rig.home / "project"
    before = rig.server.branches("project")["main"]
    (work / "x.txt").write_text("x\n")
    rig.git("add", "x.txt", cwd=work)
    rig.git("commit", "-qm", "to main", cwd=work)
    push = rig.git("push", "origin", "main", cwd=work)
    assert push.returncode != 0
    assert "[remote rejected] main -> main (sand broker: main is the default branch" in push.stderr
    assert "remote: sand broker: push refused" in push.stderr
    assert rig.server.branches("project")["main"] == before
    (refused,) = [o for o in rig.operations() if not o["allowed"]]
    assert refused["refs"] == ["refs/heads/main"] and refused["vm"] == "dev-1"
    # Nor by a branch the patterns do not name.
    rig.git("checkout", "-q", "-b", "feature", cwd=work)
    push = rig.git("push", "origin", "feature", cwd=work)
    assert "feature is not among the branches GH_TOKEN may push (agent/*)" in push.stderr
    assert "feature" not in rig.server.branches("project")


def test_another_repository_is_refused_before_the_server_is_asked(rig: Rig) -> None:
    clone = rig.git("clone", "-q", rig.server.url_for("other"), "other")
    assert clone.returncode != 0
    assert "remote: sand broker: dev-1 may not reach" in clone.stderr
    assert not any("other" in path for path, _ok in rig.server.request_log)
    (refused,) = rig.operations()
    assert (refused["vm"], refused["allowed"]) == ("dev-1", False)


def test_a_wrong_broker_credential_gets_nothing(rig: Rig) -> None:
    (rig.home / "credential").write_text("not-the-credential\n")
    clone = rig.git("clone", "-q", rig.server.url_for("project"), "project")
    assert clone.returncode != 0 and "Authentication failed" in clone.stderr
    assert rig.server.request_log == []


def test_the_token_is_attached_by_the_broker_and_written_nowhere(rig: Rig) -> None:
    assert rig.git("clone", "-q", rig.server.url_for("project"), "project").returncode == 0
    assert rig.server.request_log and all(ok for _path, ok in rig.server.request_log)
    for path in [*rig.home.rglob("*"), *rig.state.directory.rglob("*")]:
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_each_brokered_operation_is_in_the_host_audit_trail(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Allowed and refused alike, each with its VM, repository and refs, in a chain that
    verifies; the token is not in it."""
    state = tmp_path / "state"
    monkeypatch.setenv("SAND_STATE_DIR", str(state))
    url = rig.server.url_for("project")
    assert rig.git("clone", "-q", url, "project").returncode == 0
    work = rig.home / "project"
    rig.git("commit", "-q", "--allow-empty", "-m", "to main", cwd=work)
    assert rig.git("push", "-q", "origin", "main", cwd=work).returncode != 0
    told = [r for r in audit_records(state) if r["kind"] == "broker.operation"]
    *fetched, pushed = told  # a protocol v2 clone posts to upload-pack twice
    assert fetched and {(r["vm"], r["service"], r["allowed"]) for r in fetched} == {
        ("dev-1", "git-upload-pack", True)
    }
    assert (pushed["vm"], pushed["service"], pushed["allowed"]) == (
        "dev-1",
        "git-receive-pack",
        False,
    )
    assert pushed["refs"] == ["refs/heads/main"] and "default branch" in pushed["reason"]
    assert told[0]["repository"].endswith("/project.git")
    assert verify_host(state / "audit").ok
    assert TOKEN.encode() not in (state / "audit" / LOG_FILE).read_bytes()
