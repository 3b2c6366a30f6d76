"""A slow guest gets the same patience from every path that reaches its SSH.

On the real Lima, right after a cpus change (a restart under TCG), `sand shell` got in
while the first `sand destroy` refused ("failed after 3 attempts over 20s: timed out":
the unpushed-work sweep's tries were 8 s each, 20 s in all) and `status --deep` said
"no answer within 20s". Here a netns sshd guest sits behind the limactl stand-in and a
door in front of its sshd plays the slow guest, in sand's scaled time: a guest booting
(connections reset for 22 s from the first try, then answered) and a guest slow to
answer (each handshake held 10 s). `sand shell` reaches both; so must the sweep of
`sand destroy` and `status --deep`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import run_sand
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import lima_manifest, stand_in_agents
from tests.rig.slowdoor import SlowDoor

SCALE = 0.5  # sand's patience runs twice as fast; the door's times are scaled alike
pytestmark = [pytest.mark.e2e, pytest.mark.sand_time_scale(SCALE)]

MANIFEST = """\
apiVersion: sand/v1
project: patience
backends:
  laptop: {type: lima, lima_home: ./lima, derive_bases: false}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB, provision: false}
vms:
  - name: dev-1
"""


class Rig:
    def __init__(
        self,
        root: Path,
        guest: Any,
        door: SlowDoor,
        manifest: str = MANIFEST,
        env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(manifest)
        self.standin.back_with_guest("dev-1", guest, address="127.0.0.1", port=door.port)
        self.env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(root / "state"),
            "NO_COLOR": "1",
            **(env or {}),
        }
        self.env.pop("LIMA_HOME")
        self.ok("apply", "--auto-approve")

    def ok(self, *args: str) -> str:
        proc = run_sand(list(args), cwd=self.root, env=self.env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def instances(self) -> list[str]:
        return sorted(self.standin.instances())


@pytest.fixture
def door(netns_guest) -> Iterator[tuple[Any, SlowDoor]]:
    guest = netns_guest()
    slow = SlowDoor((guest.address, guest.port), scale=SCALE)
    try:
        yield guest, slow
    finally:
        slow.close()


def test_status_deep_waits_for_a_booting_guest_as_shell_does(tmp_path: Path, door) -> None:
    guest, slow = door
    rig = Rig(tmp_path, guest, slow)

    slow.behave(refuse_for=22)
    assert rig.ok("shell", "dev-1", "--", "echo", "in") == "in\n"
    assert slow.resets > 0  # the shell did meet a booting guest, and waited it out

    slow.behave(refuse_for=22)
    rows = {r["vm"]: r for r in json.loads(rig.ok("status", "--deep", "--json"))["vms"]}
    assert rows["dev-1"]["guest_health"] == [], rows["dev-1"]
    assert rows["dev-1"]["conditions"]["Healthy"] is True
    assert slow.resets > 0


def test_destroy_sweeps_a_slow_guest_as_shell_reaches_it(tmp_path: Path, door) -> None:
    guest, slow = door
    rig = Rig(tmp_path, guest, slow)

    slow.behave(hold=10)
    assert rig.ok("shell", "dev-1", "--", "echo", "in") == "in\n"

    admitted = slow.admitted
    out = rig.ok("destroy", "--auto-approve")
    assert "Destroy complete!" in out or "Apply complete!" in out, out
    assert slow.admitted > admitted  # the sweep did reach the guest through the door
    assert rig.instances() == []


SECRETS_MANIFEST = lima_manifest(
    "patience", [{"name": "dev-1", "secrets": [{"name": "NPM_TOKEN", "scope": "~/src"}]}]
)


def test_the_plans_secrets_check_waits_for_a_booting_guest_as_shell_does(
    tmp_path: Path, door
) -> None:
    """Every plan asks a running Lima guest whether its secrets survived (a reboot
    empties the tmpfs). Asked while the guest boots, it waits as sand shell would, and
    plans the delivery rather than warning that it could not tell."""
    guest, slow = door
    agents = str(stand_in_agents(tmp_path / "agents"))
    env = {"SAND_TEST_NPM": "patience-canary-31c4", "SAND_AGENT_SOURCE": agents}
    rig = Rig(tmp_path, guest, slow, SECRETS_MANIFEST, env)  # applied, provisioned
    guest.run_root(["sh", "-c", "rm -rf /run/user/*/sand /dev/shm/sand-*"], check=True)

    slow.behave(refuse_for=22)
    out = rig.ok("plan")
    assert "could not check" not in out, out
    assert "secrets lost" in out, out
    assert slow.resets > 0
