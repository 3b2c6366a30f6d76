"""Secrets are observable from any host: `sand plan` on fakepve from state dirs that
never delivered anything, and after a reboot that sand did not cause.

The VMs are left as a delivering apply leaves them: sand's own backend creates them and
records the stamp of the values it delivered (``mark_converged``, what the engine
calls after a delivery). Everything after that is the real command line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path

from sand.manifest import load_manifest
from sand.observed import SecretsRecord
from sand.project import desired_from
from sand.secrets import Stamper
from sand.state.journal import Journal
from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig

CANARY = "canary-5ec2e7-a-stamp-is-no-value"
ROTATED = "canary-rotated-9a1b-still-secret"
HOUR = 3600


def manifest(rig: FakePveRig) -> dict[str, object]:
    scoped = [{"name": "API_TOKEN", "scope": "~/work"}]
    data = rig.manifest(
        [
            {"name": "agent-1", "secrets": scoped},
            {"name": "agent-2", "secrets": scoped},
            {"name": "plain"},
        ],
        defaults={"provision": True},
        identity=str(rig.identity),
    )
    data["secrets"] = {"API_TOKEN": {"from": {"env": "SAND_TEST_API_TOKEN"}}}
    return data


def delivered_fleet(rig: FakePveRig, path: Path, journal: Path) -> dict[str, int]:
    """The VMs as an apply that delivered CANARY half an hour ago leaves them."""
    desired = desired_from(load_manifest(path))
    stamper = Stamper(desired.project)

    async def run() -> dict[str, int]:
        backend = rig.make_backend(desired.project)
        try:
            out = {}
            for vm in desired.vms:
                made = await backend.create(vm, Journal(journal))
                stamp = stamper.stamp(vm, {"API_TOKEN": CANARY} if vm.secrets else {})
                record = SecretsRecord(stamp, int(time.time()) - HOUR // 2)
                await backend.mark_converged(vm, made, record)
                out[vm.name] = int(made.identity)
            return out
        finally:
            await backend.close()

    vmids = asyncio.run(run())
    for vmid in vmids.values():
        rig.set_uptime(vmid, HOUR)  # booted an hour ago, secrets delivered after
    return vmids


def hosts(tmp_path: Path, rig: FakePveRig) -> tuple[Sand, Sand]:
    a, b = Sand(tmp_path / "host-a"), Sand(tmp_path / "host-b")
    for host in (a, b):
        host.workdir.mkdir()
        host.write(manifest(rig))
    return a, b


def everything_under(path: Path) -> str:
    chunks = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            chunks.append((Path(root) / name).read_bytes().decode(errors="replace"))
    return "\n".join(chunks)


def test_a_fresh_host_plans_no_change_with_one_request(tmp_path, fakepve_server):
    rig = fakepve_server
    a, b = hosts(tmp_path, rig)
    delivered_fleet(rig, a.manifest, tmp_path / "setup-journal.jsonl")
    env = {"SAND_TEST_API_TOKEN": CANARY}
    assert not b.state_dir.exists()  # host B has never seen these VMs

    rig.clear_log()
    proc = b.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]


def test_changed_values_show_from_every_host_and_nothing_reveals_them(tmp_path, fakepve_server):
    rig = fakepve_server
    a, b = hosts(tmp_path, rig)
    delivered_fleet(rig, a.manifest, tmp_path / "setup-journal.jsonl")
    assert a.run("plan", "--detailed-exitcode", env={"SAND_TEST_API_TOKEN": CANARY}).returncode == 0

    for host in (a, b):
        proc = host.run("plan", "--detailed-exitcode", env={"SAND_TEST_API_TOKEN": ROTATED})
        assert proc.returncode == 2, proc.stdout + proc.stderr
        out = proc.stdout
        assert out.count("secret values changed") == 2
        assert "# agent-1 (pve" in out and "# agent-2 (pve" in out and "# plain" not in out
        assert ROTATED not in out + proc.stderr

    # The stamp is neither a value nor a plain hash of one, wherever sand wrote.
    needles = [CANARY, ROTATED]
    for value in (CANARY, ROTATED):
        for algo in ("sha256", "sha1", "md5"):
            needles.append(hashlib.new(algo, value.encode()).hexdigest()[:16])
    written = [
        str(vm.config.get("tags", "")) + str(vm.config.get("description", "")) for vm in rig.vms()
    ]
    written += [everything_under(a.state_dir), everything_under(b.state_dir)]
    assert any("sand-secrets-1-" in text for text in written)
    for text in written:
        for needle in needles:
            assert needle not in text


def test_a_reboot_behind_sands_back_plans_delivery_for_that_vm_only(tmp_path, fakepve_server):
    rig = fakepve_server
    a, b = hosts(tmp_path, rig)
    vmids = delivered_fleet(rig, a.manifest, tmp_path / "setup-journal.jsonl")
    env = {"SAND_TEST_API_TOKEN": CANARY}

    rig.reboot(vmids["agent-2"])  # an operator's `qm reboot`: its tmpfs is empty now
    rig.reboot(vmids["plain"])  # no secrets: nothing to deliver
    rig.clear_log()
    proc = b.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "# agent-2 (pve" in proc.stdout
        and "secrets lost (guest rebooted after their delivery at " in proc.stdout
    )
    assert "# agent-1" not in proc.stdout and "# plain" not in proc.stdout
    assert "Plan: 0 to add, 1 to change, 0 to destroy." in proc.stdout
    assert rig.count() == 1  # still the one listing
    started = rig.vm(vmids["agent-2"]).started_at
    plan = json.loads(b.run("plan", "--json", env=env).stdout)
    seen = int(time.time() - started)  # the most uptime that plan can have read
    # The listing's uptime moves on (PVE counts it in whole seconds): the plan must not.
    deadline = time.monotonic() + 10
    while int(time.time() - started) <= seen:
        assert time.monotonic() < deadline, "the uptime did not move"
        time.sleep(0.02)
    assert json.loads(b.run("plan", "--json", env=env).stdout)["changes"] == plan["changes"]
    changes = {c["vm"]: c for c in plan["changes"]}
    assert changes["agent-2"]["action"] == "reprovision" and changes["agent-2"]["secrets_only"]
    assert changes["agent-1"]["action"] == changes["plain"]["action"] == "no-op"


def test_status_shows_the_fleet_when_a_secret_cannot_be_read(tmp_path, fakepve_server):
    """`sand status` is a read-only view: an unset env: secret must not hide every VM."""
    from tests.cli.helpers import Sand

    rig = fakepve_server
    sand = Sand(tmp_path)
    manifest = rig.manifest(
        [{"name": "agent-1", "secrets": [{"name": "TOK", "scope": "~/src"}]}, {"name": "b"}],
        defaults={"provision": True},
    )
    manifest["secrets"] = {"TOK": {"from": {"env": "SAND_TEST_UNSET_SECRET"}}}
    sand.write(manifest)
    assert "SAND_TEST_UNSET_SECRET" not in os.environ
    status = sand.run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "agent-1" in status.stdout and "b " in status.stdout
    assert "agent-1: its secrets are not compared" in status.stdout
    assert "SAND_TEST_UNSET_SECRET is not set" in status.stdout
    as_json = json.loads(sand.run("status", "--json").stdout)
    assert {r["vm"] for r in as_json["vms"]} == {"agent-1", "b"}
    assert any("not compared" in w for w in as_json["warnings"])
    # plan and apply still refuse: they would deliver it.
    assert sand.run("plan").returncode == 1
