"""Saved plans survive a moved checkout, and still refuse a changed manifest or world.

`sand plan --out` records the manifest relative to the plan file; the checkout (manifest
and plan file together) is moved to another directory and applied from there against
fakepve, whose own state says what happened.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import Sand

VMS = [{"name": "web-1"}, {"name": "web-2", "memory": "2GiB"}]


def names(rig) -> list[str]:
    return sorted(vm.name for vm in rig.vms())


@pytest.fixture
def checkout(tmp_path: Path, fakepve_server) -> Path:
    """``old/`` holding sand.yaml and create.plan (made there, against an empty pool)."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "sand.yaml").write_text(yaml.safe_dump(fakepve_server.manifest(VMS)))
    sand = Sand(tmp_path)
    proc = sand.run("plan", "--out", str(old / "create.plan"), str(old / "sand.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return old


def move(checkout: Path) -> Path:
    new = checkout.parent / "elsewhere" / "moved"
    new.parent.mkdir()
    shutil.move(str(checkout), str(new))
    assert not checkout.exists()
    return new


def test_the_plan_file_records_a_relative_manifest(checkout: Path) -> None:
    saved = json.loads((checkout / "create.plan").read_text())
    assert saved["manifest"] == "sand.yaml"
    assert str(checkout) not in (checkout / "create.plan").read_text()


def test_a_moved_checkout_applies_its_saved_plan(tmp_path: Path, checkout: Path, fakepve_server):
    new = move(checkout)
    proc = Sand(tmp_path).run("apply", str(new / "create.plan"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 added" in proc.stdout
    assert names(fakepve_server) == ["web-1", "web-2"]
    assert int(fakepve_server.vms_named("web-2")[0].config["memory"]) == 2048
    # Applied once, the world moved: the same plan file is now stale, no duplicates.
    again = Sand(tmp_path).run("apply", str(new / "create.plan"))
    assert again.returncode == 1
    assert "stale" in again.stderr or "differs" in again.stderr
    assert names(fakepve_server) == ["web-1", "web-2"]


def test_a_moved_checkout_with_an_edited_manifest_is_refused(
    tmp_path: Path, checkout: Path, fakepve_server
) -> None:
    new = move(checkout)
    manifest = new / "sand.yaml"
    manifest.write_text(manifest.read_text().replace("web-2", "web-3"))
    fakepve_server.clear_log()
    proc = Sand(tmp_path).run("apply", str(new / "create.plan"))
    assert proc.returncode == 1
    assert f"the manifest {manifest} changed since the plan was saved" in proc.stderr
    assert names(fakepve_server) == []
    assert not [r for r in fakepve_server.log if r.method != "GET"]  # nothing was sent


def test_a_moved_checkout_refuses_a_changed_world(
    tmp_path: Path, checkout: Path, fakepve_server
) -> None:
    new = move(checkout)
    sand = Sand(tmp_path)
    # Someone applies the manifest itself first: the plan (made on an empty pool) is stale.
    assert sand.run("apply", "--auto-approve", str(new / "sand.yaml")).returncode == 0
    vmids = sorted(vm.vmid for vm in fakepve_server.vms())
    proc = sand.run("apply", str(new / "create.plan"))
    assert proc.returncode == 1
    assert "stale" in proc.stderr
    assert sorted(vm.vmid for vm in fakepve_server.vms()) == vmids  # no duplicates


def test_a_plan_file_moved_without_its_manifest_is_refused(
    tmp_path: Path, checkout: Path, fakepve_server
) -> None:
    lone = tmp_path / "lone.plan"
    shutil.move(str(checkout / "create.plan"), str(lone))
    proc = Sand(tmp_path).run("apply", str(lone))
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr and "keep the two together" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert names(fakepve_server) == []


def test_an_old_plan_file_with_an_absolute_path_still_applies(
    tmp_path: Path, checkout: Path, fakepve_server
) -> None:
    plan = checkout / "create.plan"
    saved = json.loads(plan.read_text())
    saved["manifest"] = str((checkout / "sand.yaml").resolve())  # as sand wrote it before
    plan.write_text(json.dumps(saved))
    elsewhere = tmp_path / "plans"
    elsewhere.mkdir()
    shutil.move(str(plan), str(elsewhere / "create.plan"))
    proc = Sand(tmp_path).run("apply", str(elsewhere / "create.plan"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert names(fakepve_server) == ["web-1", "web-2"]
