"""A warm claim on Lima with a real guest behind the limactl stand-in (issue 41, item 4):
the claimed VM keeps the SSH host keys and machine-id its spare made its own (the
claim makes no key), the key sand pins for it is that very key, and it answers
``sand shell`` under its new name and hostname. With a brokered repo token (issue 38),
the claimed VM alone gets a broker credential and the token reaches no guest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sand.guest.pinfile import read_pins
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import as_user, root, stand_in_agents

if TYPE_CHECKING:
    from tests.rig.guest import NetnsGuest

pytestmark = pytest.mark.e2e

MANIFEST = """\
apiVersion: sand/v1
project: poolkeys
backends:
  laptop: {{type: lima, lima_home: ./lima, derive_bases: false}}
pools:
  agents: {{warm: 1}}
defaults: {{image: debian-12, disk: 20GiB, memory: 2GiB, agents: [claude]}}
vms:{vms}
"""


def identity(guest: NetnsGuest) -> tuple[str, str]:
    key = root(guest, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()
    return root(guest, "cat", "/etc/machine-id").strip(), f"{key[0]} {key[1]}"


def _spare_behind_the_standin(
    tmp_path: Path, netns_guest: Any, **extra: str
) -> tuple[Any, StandIn, dict[str, str]]:
    """A netns guest behind the limactl stand-in as the pool's first spare, and the
    environment sand runs in against it (``extra`` added)."""
    guest = netns_guest()
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.back_with_guest("agents-spare-1", guest)
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(tmp_path / "state"),
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
        "NO_COLOR": "1",
        **extra,
    }
    env.pop("LIMA_HOME")
    return guest, standin, env


def test_a_claimed_spare_keeps_its_own_host_key_and_its_pin(tmp_path: Path, netns_guest) -> None:
    guest, standin, env = _spare_behind_the_standin(tmp_path, netns_guest)
    manifest = tmp_path / "sand.yaml"

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sand", *args]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)

    manifest.write_text(MANIFEST.format(vms=" []"))
    proc = sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spare = identity(guest)

    manifest.write_text(MANIFEST.format(vms="\n  - name: agent-a\n    pool: agents\n"))
    # Targeted: the claim, without the refill (which this one guest cannot back).
    proc = sand("apply", "--auto-approve", "--target", "agent-a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "claims spare agents-spare-1" in proc.stdout, proc.stdout
    assert "agent-a" in standin.instances() and "agents-spare-1" not in standin.instances()
    assert identity(guest) == spare
    pins = read_pins(tmp_path / "state" / "known_hosts")
    (pinned,) = [keys for name, keys in pins.items() if name.startswith("lima-agent-a")]
    assert pinned == [spare[1]]
    shell = sand("shell", "agent-a", "--", "hostname")
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert shell.stdout == "agent-a\n"


BROKERED = """\
apiVersion: sand/v1
project: poolbroker
backends:
  laptop: {{type: lima, lima_home: ./lima, derive_bases: false}}
pools:
  agents: {{warm: 1}}
secrets:
  GH_TOKEN:
    from: {{env: SAND_TEST_GH}}
    deliver: broker
    broker: {{repositories: ["{url}"], push: ["agent/*"]}}
repos:
  project: {{url: "{url}", token: GH_TOKEN}}
defaults: {{image: debian-12, disk: 20GiB, memory: 2GiB, agents: [claude]}}
vms:{vms}
"""
CREDENTIAL = "cat /run/user/*/sand/git/broker /dev/shm/sand-*/git/broker 2>/dev/null; true"


def test_a_claimed_spare_gets_its_own_broker_credential_and_never_the_token(
    tmp_path: Path, netns_guest
) -> None:
    """A warm claim on Lima with a brokered repo token (issue 38, item 3): the spare,
    provisioned with nothing per VM, holds no broker credential and has no grant; the
    claim draws one for the claimed VM alone, with which it clones and pushes through
    the broker; the token is in none of the guest's files or processes, sand's output or
    its state."""
    from tests.e2e.test_broker_guests import _commit_and_push, _guest_holding, _host_holding
    from tests.rig.gitserver import GitServer
    from tests.rig.guest import ensure_bridge
    from tests.rig.tlscert import self_signed

    cert, key = self_signed(tmp_path, ensure_bridge())
    server = GitServer(f"rig-lima-claim-{os.urandom(12).hex()}", tls=(cert, key)).start()
    url = server.create_repo("project", {"README.md": "claimed through the broker\n"})
    guest, standin, env = _spare_behind_the_standin(
        tmp_path,
        netns_guest,
        SAND_TEST_GH=server.token,
        SSL_CERT_FILE=cert,  # the broker checks the rig server's certificate
    )
    manifest = tmp_path / "sand.yaml"
    output = ""
    grants = tmp_path / "state" / "projects" / "poolbroker" / "broker" / "grants.json"

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        nonlocal output
        argv = [sys.executable, "-m", "sand", *args]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        output += proc.stdout + proc.stderr
        return proc

    try:
        manifest.write_text(BROKERED.format(url=url, vms=" []"))
        proc = sand("apply", "--auto-approve")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # A spare has no repo and no secret: no credential, no grant.
        assert guest.run_root(["sh", "-c", CREDENTIAL]).stdout.strip() == b""
        assert not grants.exists() or "agents-spare-1" not in json.loads(grants.read_text())

        vms = "\n  - {name: agent-a, pool: agents, repos: [project]}\n"
        manifest.write_text(BROKERED.format(url=url, vms=vms))
        plan = sand("plan", "--target", "agent-a")
        assert "claims spare agents-spare-1" in plan.stdout, plan.stdout
        assert "brokered (the token stays on this host) GH_TOKEN" in plan.stdout, plan.stdout
        # Targeted: the claim, without the refill (which this one guest cannot back).
        proc = sand("apply", "--auto-approve", "--target", "agent-a")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "agent-a" in standin.instances() and "agents-spare-1" not in standin.instances()
        assert set(json.loads(grants.read_text())) == {"agent-a"}
        assert guest.run_root(["sh", "-c", CREDENTIAL]).stdout.strip()
        readme = as_user(guest, "cat ~/src/project/README.md").stdout
        assert readme == b"claimed through the broker\n"
        pushed = _commit_and_push(guest, "agent/claimed")
        assert pushed.returncode == 0, pushed.stderr
        assert "agent/claimed" in server.branches("project")

        assert _guest_holding(guest, server.token) == []
        assert server.token not in output
        assert _host_holding(tmp_path, server.token) == []
    finally:
        sand("destroy", "--auto-approve")
        server.stop()
