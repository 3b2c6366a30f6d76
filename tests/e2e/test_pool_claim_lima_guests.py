"""A warm claim on Lima with a real guest behind the limactl stand-in (issue 41, item 4):
the claimed VM keeps the SSH host keys and machine-id its spare made its own (the
claim makes no key), the key sand pins for it is that very key, and it answers
``sand shell`` under its new name and hostname."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.pinfile import read_pins
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import root, stand_in_agents

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


def test_a_claimed_spare_keeps_its_own_host_key_and_its_pin(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.back_with_guest("agents-spare-1", guest)
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(tmp_path / "state"),
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")
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
