"""Brokered git from a real guest: ``sand apply`` on the limactl stand-in, a netns
guest behind the instance, the rig's token-protected git server over HTTPS.

The guest clones, fetches and pushes to an allowed branch through the broker; a
push to the default branch or a clone of another repository is refused by it; and
the token's bytes are nowhere sand could have put them: the guest's files (tmpfs
included), every guest process's environment and argv, sand's output, the host's
state, the broker's own environment and argv.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_apply_lima_guests import Cli
from tests.provision.e2e_helpers import as_user
from tests.rig.gitserver import GitServer
from tests.rig.tlscert import self_signed

pytestmark = pytest.mark.e2e

GUEST_PLACES = "/home /root /etc /var /tmp /opt /usr/local /srv /run /dev/shm"


class Rig:
    """The stand-in's ``Cli`` (sand as a process) with this test's manifest."""

    def __init__(self, root: Path, server: GitServer) -> None:
        self.root = root
        self.server = server
        self.cli = Cli(root)
        self.output = ""

    def write(self, push: list[str], fork: bool = False) -> None:
        project = self.server.url_for("project")
        secret = {"from": {"env": "SAND_TEST_GH"}, "deliver": "broker"}
        secret["broker"] = {"repositories": [project], "push": push}
        manifest = {
            "apiVersion": "sand/v1",
            "project": "brokere2e",
            "backends": {"laptop": {"type": "lima", "lima_home": "./lima", "derive_bases": False}},
            "secrets": {"GH_TOKEN": secret},
            "repos": {"project": {"url": project, "token": "GH_TOKEN"}},
            "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB"},
            "vms": [{"name": "dev-1", "repos": ["project"]}],
        }
        if fork:
            manifest["vms"].append({"name": "try-1", "from": {"vm": "dev-1"}})
        self.cli.manifest.write_text(json.dumps(manifest))

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.cli.sand(*args)
        self.output += proc.stdout + proc.stderr
        return proc

    def broker_pid(self) -> int | None:
        path = self.root / "state" / "projects" / "brokere2e" / "broker" / "run.json"
        return json.loads(path.read_text())["pid"] if path.exists() else None


@pytest.fixture
def rig(tmp_path: Path, netns_guest, monkeypatch) -> Iterator[tuple[Rig, object]]:
    from tests.rig.guest import ensure_bridge

    cert, key = self_signed(tmp_path, ensure_bridge())
    server = GitServer(f"rig-brokered-{os.urandom(12).hex()}", tls=(cert, key)).start()
    server.create_repo("project", {"README.md": "through the broker\n"})
    server.create_repo("other")
    monkeypatch.setenv("SAND_TEST_GH", server.token)
    # The broker checks the rig server's certificate as it would GitHub's.
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    guest = netns_guest()
    cli = Rig(tmp_path, server)
    cli.cli.standin.back_with_guest("dev-1", guest)
    try:
        yield cli, guest
    finally:
        cli.sand("destroy", "--auto-approve")
        server.stop()


def _git(guest, script: str) -> subprocess.CompletedProcess[bytes]:
    return as_user(guest, f"cd ~/src/project && GIT_TERMINAL_PROMPT=0 {script}")


def _commit_and_push(guest, branch: str) -> subprocess.CompletedProcess[bytes]:
    return _git(
        guest,
        f"git checkout -q -B {shlex.quote(branch)} && date +%s%N > work.txt && git add work.txt "
        "&& git -c user.name=a -c user.email=a@b commit -qm work && "
        f"git push -q origin {shlex.quote(branch)}",
    )


# A credential helper answering with the broker credential the guest saved before.
HELPER = "!f() { echo username=x; printf 'password=%s\\n' \"$(cat ~/old-credential)\"; }; f"


def _status_from_host(cli: Rig, credential: str) -> int:
    """The broker's answer to a fetch's discovery sent from this host with ``credential``."""
    run = cli.root / "state" / "projects" / "brokere2e" / "broker" / "run.json"
    ((address, port),) = json.loads(run.read_text())["ports"].items()
    upstream = cli.server.url_for("project").removeprefix("https://")
    url = f"http://{address}:{port}/{upstream}/info/refs?service=git-upload-pack"
    pair = base64.b64encode(f"x:{credential}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {pair}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _guest_holding(guest, text: str) -> list[str]:
    """Guest files, and guest processes' environments and argv, holding ``text``
    (the pattern on stdin, never in an argv)."""
    script = (
        f'read -r p; grep -rlsF -e "$p" {GUEST_PLACES} || true; '
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        'grep -lsF -e "$p" "$f" || true; done'
    )
    result = guest.run_root(["sh", "-c", script], input=(text + "\n").encode())
    assert result.returncode == 0, result.stderr
    return [p for p in result.stdout.decode().split() if not p.startswith("/proc/self/")]


def _host_holding(root: Path, text: str) -> list[str]:
    return [
        str(p)
        for p in (root / "state").rglob("*")
        if p.is_file() and text.encode() in p.read_bytes()
    ]


def test_git_goes_through_the_broker_and_the_token_never_reaches_the_guest(rig) -> None:
    cli, guest = rig
    token = cli.server.token
    cli.write(["agent/*"])
    plan = cli.sand("plan")
    assert "brokered (the token stays on this host) GH_TOKEN" in plan.stdout, plan.stdout
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert as_user(guest, "cat ~/src/project/README.md").stdout == b"through the broker\n"

    # Fetch, and a push to an allowed branch, land on the server.
    assert _git(guest, "git fetch -q origin").returncode == 0
    pushed = _commit_and_push(guest, "agent/one")
    assert pushed.returncode == 0, pushed.stderr
    assert "agent/one" in cli.server.branches("project")

    # The default branch and another repository: refused by the broker, in words.
    main = cli.server.branches("project")["main"]
    refused = _commit_and_push(guest, "main")
    assert refused.returncode != 0
    assert b"sand broker: main is the default branch" in refused.stderr
    assert cli.server.branches("project")["main"] == main
    other = as_user(guest, f"GIT_TERMINAL_PROMPT=0 git clone -q {cli.server.url_for('other')} ~/o")
    assert other.returncode != 0 and b"sand broker: dev-1 may not reach" in other.stderr
    assert not any("other" in path for path, _ok in cli.server.request_log)

    # Each operation is recorded on the host, by VM, without the token.
    log = cli.root / "state" / "projects" / "brokere2e" / "broker" / "operations.jsonl"
    ops = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(o["vm"], o["service"], o["allowed"]) for o in ops} >= {
        ("dev-1", "git-upload-pack", True),
        ("dev-1", "git-receive-pack", True),
        ("dev-1", "git-receive-pack", False),
    }

    # A reprovision (the rules changed) draws a new broker credential: the old one dies.
    old = guest.run_root(["sh", "-c", "cat /run/user/*/sand/git/broker /dev/shm/sand-*/git/broker"])
    cli.write(["agent/*", "review/*"])
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = guest.run_root(["sh", "-c", "cat /run/user/*/sand/git/broker /dev/shm/sand-*/git/broker"])
    assert old.stdout.strip() and new.stdout.strip() and old.stdout != new.stdout
    assert _commit_and_push(guest, "review/two").returncode == 0
    assert "review/two" in cli.server.branches("project")
    # The old credential is refused, from the guest itself.
    save = "umask 077; cat > ~/old-credential"
    guest.run_root(["runuser", "-l", guest.user, "-c", save], input=old.stdout, check=True)
    stale = _git(
        guest, f"git -c credential.helper= -c credential.helper={shlex.quote(HELPER)} fetch"
    )
    assert stale.returncode != 0 and b"Authentication failed" in stale.stderr, stale.stderr
    # The new one is taken from the guest's address only: not from this host's.
    assert _status_from_host(cli, new.stdout.decode().strip()) == 401

    # The token's bytes: in no guest file or process, output, host state, nor the
    # broker's own environment and argv.
    assert _guest_holding(guest, token) == []
    assert token not in cli.output
    assert _host_holding(cli.root, token) == []
    pid = cli.broker_pid()
    assert pid is not None
    for what in ("environ", "cmdline"):
        assert token.encode() not in Path(f"/proc/{pid}/{what}").read_bytes()

    # Destroyed, the VM's credential dies and the broker, needed by no VM, stops.
    proc = cli.sand("destroy", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cli.broker_pid() is None
    assert (
        not Path(f"/proc/{pid}").exists()
        or b"sand.broker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )


CREDENTIAL = "cat /run/user/*/sand/git/broker /dev/shm/sand-*/git/broker 2>/dev/null"


def test_a_fork_gets_its_own_broker_credential_which_dies_with_it(rig, netns_guest) -> None:
    cli, source = rig
    copy = netns_guest()
    cli.cli.standin.back_with_guest("try-1", copy)  # what the clone boots as
    cli.write(["agent/*"])
    assert cli.sand("apply", "--auto-approve").returncode == 0, cli.output
    cli.write(["agent/*"], fork=True)
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mine, theirs = (g.run_root(["sh", "-c", CREDENTIAL]).stdout.strip() for g in (source, copy))
    assert mine and theirs and mine != theirs
    grants = cli.root / "state" / "projects" / "brokere2e" / "broker" / "grants.json"
    assert set(json.loads(grants.read_text())) == {"dev-1", "try-1"}
    assert _commit_and_push(copy, "agent/from-the-fork").returncode == 0
    assert "agent/from-the-fork" in cli.server.branches("project")

    # The fork deleted, its credential is refused (its guest still holds it); the
    # source's still works.
    cli.write(["agent/*"])
    proc = cli.sand("apply", "--auto-approve", "--allow-data-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(json.loads(grants.read_text())) == {"dev-1"}
    stale = _git(copy, "git fetch -q origin")
    assert stale.returncode != 0 and b"Authentication failed" in stale.stderr, stale.stderr
    assert _git(source, "git fetch -q origin").returncode == 0
    assert _guest_holding(copy, cli.server.token) == []
