"""End to end: ``sand apply|plan|doctor`` in a subprocess against fakepve (provision: false)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakepve_rig.rig import FakePveRig

ROOT = Path(__file__).resolve().parents[3]


class Sand:
    def __init__(self, rig: FakePveRig, tmp_path: Path) -> None:
        self.rig = rig
        self.manifest = tmp_path / "sand.yaml"
        self.env = dict(
            os.environ,
            SAND_STATE_DIR=str(tmp_path / "state"),
            PYTHONPATH=str(ROOT),
            NO_COLOR="1",
        )

    def write(self, vms: list[dict[str, Any]], **kwargs: Any) -> None:
        self.manifest.write_text(yaml.safe_dump(self.rig.manifest(vms, **kwargs)))

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args, str(self.manifest)],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=120,
        )


@pytest.fixture
def sand(rig: FakePveRig, tmp_path: Path) -> Sand:
    return Sand(rig, tmp_path)


def test_apply_then_a_no_op_plan_is_one_listing(sand: Sand, rig: FakePveRig) -> None:
    sand.write([{"name": f"dev-{i}", "memory": "2GiB", "disk": "10GiB"} for i in range(3)])
    done = sand("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Apply complete! Resources: 3 added, 0 changed, 0 destroyed" in done.stdout
    assert sorted(v.name for v in rig.vms()) == ["dev-0", "dev-1", "dev-2"]
    rig.clear_log()
    again = sand("plan", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]


def test_change_then_remove_touches_only_what_changed(sand: Sand, rig: FakePveRig) -> None:
    entries = [{"name": "keep", "memory": "2GiB"}, {"name": "grow", "memory": "2GiB"}]
    entries.append({"name": "drop", "memory": "2GiB"})
    sand.write(entries)
    assert sand("apply", "--auto-approve").returncode == 0
    rig.seed_vm(300, "humans-vm", tags="team-a")  # in the pool, not sand's
    ids = {v.name: v.vmid for v in rig.vms()}
    keep_before = dict(rig.vm(ids["keep"]).config)  # type: ignore[union-attr]

    entries[1]["memory"] = "4GiB"
    sand.write(entries)
    changed = sand("apply", "--auto-approve")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "0 added, 1 changed, 0 destroyed" in changed.stdout
    assert str(rig.vm(ids["grow"]).config["memory"]) == "4096"  # type: ignore[union-attr]
    assert rig.vm(ids["grow"]).pending == {}  # type: ignore[union-attr]

    sand.write(entries[:2])
    # No guest behind it to sweep: the guard is tested in test_guard.py.
    removed = sand("apply", "--auto-approve", "--allow-data-loss")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "0 added, 0 changed, 1 destroyed" in removed.stdout
    assert sorted(v.name for v in rig.vms()) == ["grow", "humans-vm", "keep"]
    assert rig.vm(ids["keep"]).config == keep_before  # type: ignore[union-attr]
    assert rig.vm(9000) is not None  # the template
    assert sand("plan", "--detailed-exitcode").returncode == 0


def test_doctor_passes_a_pool_token_and_fails_a_root_one(sand: Sand, rig: FakePveRig) -> None:
    sand.write([])
    ok = sand("doctor")
    assert ok.returncode == 0 and "pve: ok" in ok.stdout, ok.stdout + ok.stderr
    sand.write([], token_file=str(rig.add_token("sand@pve!admin", acl="root")))
    broad = sand("doctor")
    assert broad.returncode == 1
    assert "too broad" in broad.stdout


def test_a_readable_token_file_stops_sand_without_showing_the_secret(
    sand: Sand, rig: FakePveRig
) -> None:
    secret = rig.token_file.read_text().strip().partition("=")[2]
    rig.token_file.chmod(0o644)
    sand.write([{"name": "dev"}])
    out = sand("apply", "--auto-approve")
    # The engine reports the backend as unknown and blocks every VM on it (its exit
    # status for a blocked plan is the engine's business).
    assert f"chmod 600 {rig.token_file}" in out.stdout + out.stderr
    assert secret not in out.stdout + out.stderr
    assert rig.count() == 0 and rig.vms() == []
