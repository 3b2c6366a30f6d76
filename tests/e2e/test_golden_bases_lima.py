"""Golden bases on the limactl stand-in with real guests (``tests/rig/clones.py``).

The base is a stand-in instance whose guest is provisioned for real from the rig's apt
mirror, frozen once sand has stopped and stamped it; each VM is ``limactl clone``d from
it and its guest starts from the frozen disk. Asserted on the far side: the stand-in's
instances and sidecars, the mirror's log, each guest's packages, agents and step log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import out, root, stand_in_agents
from tests.rig.clones import LimaLayeredGuests

pytestmark = pytest.mark.e2e

MACHINE_STEPS = ("packages", "toolchain", "agents")


def _manifest(images: dict) -> dict:
    return {
        "apiVersion": "sand/v1",
        "project": "limagold",
        "backends": {"laptop": {"type": "lima", "lima_home": "./lima"}},
        "images": images,
        "defaults": {"image": "wb", "disk": "20GiB", "memory": "2GiB", "timezone": "Etc/UTC"},
        "vms": [{"name": "a"}, {"name": "b"}],
    }


def _sand(root_dir: Path, standin: StandIn, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(root_dir / "state"),
        "SAND_AGENT_SOURCE": str(stand_in_agents(root_dir / "agents")),
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")
    return subprocess.run(
        [sys.executable, "-m", "sand", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root_dir,
        check=False,
    )


def test_lima_vms_of_a_golden_image_are_cloned_from_its_provisioned_base(
    tmp_path, rig_rootfs, apt_mirror
):
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.configure(await_guest=120)
    (tmp_path / "sand.yaml").write_text(
        yaml.safe_dump(_manifest({"wb": {"packages": ["tini"], "agents": ["claude", "codex"]}}))
    )
    guests = LimaLayeredGuests(standin, workbench=rig_rootfs, mirror=apt_mirror)
    try:
        with guests:
            proc = _sand(tmp_path, standin, "apply", "--auto-approve")
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)

        (base,) = [n for n in standin.instances() if n.startswith("sand-base-")]
        stamp = json.loads((standin.instance_dir(base) / "sand-base.json").read_text())
        fingerprint = stamp["golden"]
        assert base == f"sand-base-limagold-{fingerprint[:12]}"
        assert stamp["image_name"] == "wb" and stamp["backend"] == "laptop"
        clones = [i.argv for i in standin.invocations() if i.command == "clone"]
        assert sorted(tuple(a for a in argv if a in (base, "a", "b")) for argv in clones) == [
            (base, "a"),
            (base, "b"),
        ], clones
        assert sum(1 for r in apt_mirror.requests if "/tini_" in r) == 1
        for name in ("a", "b"):
            marker = json.loads((standin.instance_dir(name) / "sand-marker.json").read_text())
            assert marker["base"] == fingerprint
            guest = guests.by_name[name]
            status = root(guest, "dpkg-query", "-W", "-f=${db:Status-Abbrev}", "tini")
            assert status.startswith("ii")
            assert "stand-in codex" in out(guest, "codex --version")
            log = [ln.split() for ln in root(guest, "cat", "/var/lib/sand/step-log").splitlines()]
            assert set(MACHINE_STEPS) <= {w[2] for w in log if w[1] == "base:wb" and w[3] == "ran"}
            assert not [w for w in log if w[1] == f"vm:{name}" and w[2] in MACHINE_STEPS]

        again = _sand(tmp_path, standin, "plan", "--detailed-exitcode")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "No changes." in again.stdout
    finally:
        guests.stop()
