"""sand believes only what it can prove about which Proxmox VMs are its own.

Each scenario runs the real CLI against fakepve and reads fakepve's own state (VMs,
configs, pools) and request log, not sand's output alone.
"""

from __future__ import annotations

import json
import time

import pytest

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv
from tests.fakepve_rig.rig import FakePveRig

THREE = [{"name": "web-1"}, {"name": "web-2"}, {"name": "web-3"}]


def host(tmp_path, name: str) -> Sand:
    """A controller of its own (its own state dir), as another machine would be."""
    (tmp_path / name).mkdir()
    return Sand(tmp_path / name)


def journal_of(sand: Sand):
    return sand.state_dir / "projects" / "demo" / "journal.jsonl"


def block_of(rig: FakePveRig, vmid: int) -> dict:
    vm = rig.vm(vmid)
    assert vm is not None
    return desc.parse_block(vm.config.get("description")) or {}


def vmid_of(rig: FakePveRig, name: str) -> int:
    (vm,) = rig.vms_named(name)
    return int(vm.vmid)


# --- item 9: ownership is per backend --------------------------------------------------


@pytest.mark.fakepve_rig(nodes=("pve1", "pve2"), shared_storage=True)
def test_two_backends_on_one_pool_never_take_each_others_vms(tmp_path, fakepve_server):
    rig = fakepve_server
    east, west = host(tmp_path, "east"), host(tmp_path, "west")
    east.write(rig.manifest(THREE[:2], backend="east", node="pve1", nodes=None))
    west.write(rig.manifest([{"name": "api-1"}], backend="west", node="pve2", nodes=None))
    assert east.run("apply", "--auto-approve").returncode == 0
    before = {vm.vmid: dict(vm.config) for vm in rig.vms()}
    assert all(mk.backend_tag("east") in cfg["tags"] for cfg in before.values())

    plan = west.plan_json()
    assert [(c["vm"], c["action"]) for c in plan["changes"]] == [("api-1", "create")]
    proc = west.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["api-1", "web-1", "web-2"]
    assert {vm.vmid: dict(vm.config) for vm in rig.vms() if vm.name != "api-1"} == before
    # ...and the west backend emptied prunes only its own VM.
    west.write(rig.manifest([], backend="west", node="pve2", nodes=None))
    # (No guest behind it to sweep for unpushed work: the guard has tests of its own.)
    proc = west.run("apply", "--auto-approve", "--allow-mass-delete", "--allow-data-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2"]
    assert east.run("plan", "--detailed-exitcode").returncode == 0


def test_a_vm_an_older_sand_marked_is_adopted_and_named(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    (vm,) = rig.desired([{"name": "web-1"}], backend="Pve.East")
    rig.seed_managed(vm, 120)  # tags and block without a backend name
    sand.write(rig.manifest([{"name": "web-1", "cpus": 4}], backend="Pve.East"))
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [v.vmid for v in rig.vms()] == [120]
    tags = mk.split_tags(rig.vm(120).config["tags"])
    # "Pve.East" is no valid tag (PVE lower-cases tags): written as a short hash of the name.
    assert mk.backend_tag("Pve.East") in tags and mk.backend_tag("Pve.East").startswith(
        "sand-backend+"
    )
    block = block_of(rig, 120)
    assert block["backend"] == "Pve.East" and block["op"]  # an incarnation, once
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


# --- item 14: recovery proves identity before it acts ----------------------------------


def _destroy_task_started(records: list[dict]) -> bool:
    return any(
        r.get("phase") == "step" and ":qmdestroy:" in str(r.get("upid") or "") for r in records
    )


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_a_replayed_delete_never_destroys_the_vm_another_host_made_on_that_vmid(
    tmp_path, fakepve_server
):
    rig = fakepve_server
    a, b = host(tmp_path, "a"), host(tmp_path, "b")
    a.write(rig.manifest(THREE))
    assert a.run("apply", "--auto-approve").returncode == 0
    old = vmid_of(rig, "web-3")
    old_op = block_of(rig, old)["op"]

    # Host A drops web-3 and is killed right after PVE accepted the delete.
    rig.set_task_secs("qmdestroy", 1.0)
    a.write(rig.manifest(THREE[:2]))
    killed = kill_when(
        # fakepve's VMs have no guest to sweep for unpushed work.
        sand_argv("apply", "--auto-approve", "--allow-data-loss"),
        env_for(a.state_dir),
        a.workdir,
        journal_of(a),
        _destroy_task_started,
    )
    assert killed
    deadline = time.monotonic() + 20
    while rig.vm(old) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rig.vm(old) is None  # the delete went through without A
    rig.set_task_secs("qmdestroy", 0.0)

    # Host B, still on the manifest with web-3, makes it again: PVE hands out the freed id.
    b.write(rig.manifest(THREE))
    proc = b.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert vmid_of(rig, "web-3") == old
    b_op = block_of(rig, old)["op"]
    assert b_op and b_op != old_op

    # Host A's manifest catches up; its journal still holds the delete of web-3.
    a.write(rig.manifest(THREE))
    plan = a.plan_json()
    (recovery,) = plan["recovery"]
    assert (recovery["op"], recovery["identity"], recovery["action"]) == (
        "delete",
        str(old),
        "moot",
    )
    assert {c["vm"]: c["action"] for c in plan["changes"]}["web-3"] == "no-op"
    text = a.run("plan").stdout
    assert f"web-3 (pve, {old}) will recover: the interrupted delete of web-3 is moot" in text
    proc = a.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert vmid_of(rig, "web-3") == old and block_of(rig, old)["op"] == b_op
    assert not rig.requests("DELETE", f"/nodes/pve1/qemu/{old}")[1:]  # only A's first delete
    assert a.run("plan", "--detailed-exitcode").returncode == 0


@pytest.mark.fakepve_rig(acl="root")
def test_a_vm_with_our_marker_in_no_pool_is_never_managed(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    (web1, stray) = rig.desired([{"name": "web-1"}, {"name": "stray"}])
    rig.seed_managed(web1, 130, pool=None)  # taken out of the pool by an operator
    rig.seed_managed(stray, 131, pool=None)
    before = {v: dict(rig.vm(v).config) for v in (130, 131)}
    sand.write(rig.manifest([{"name": "web-1"}]))

    res = sand.run("plan", "--json")
    assert res.returncode == 1, res.stderr  # blocked
    plan = json.loads(res.stdout)
    # Neither adopted nor pruned; and no second web-1 beside the one out of the pool.
    ((vm, action, reasons),) = [(c["vm"], c["action"], c["reasons"]) for c in plan["changes"]]
    assert (vm, action) == ("web-1", "blocked")
    assert "VM 130 carries this project's marker" in reasons[0] and "in no pool" in reasons[0]
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {v: dict(rig.vm(v).config) for v in (130, 131)} == before
    assert [v.vmid for v in rig.vms()] == [130, 131]
    assert rig.count("DELETE") == rig.count("PUT") == rig.count("POST") == 0

    # Back in the pool, it is sand's again.
    rig.run(rig.pve._pool_join, "sand", 130)
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "stray"}]))
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1  # stray is still outside the pool: blocked
    assert [v.vmid for v in rig.vms()] == [130, 131]
    assert rig.count("DELETE") == 0


def test_an_operators_protection_is_left_on_and_noted(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    sand.write(rig.manifest([{"name": "web-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    vmid = vmid_of(rig, "web-1")
    rig.run(rig.pve.vm(vmid).config.__setitem__, "protection", 1)  # set in the web UI

    sand.write(rig.manifest([{"name": "web-1", "cpus": 4, "protect": False}]))
    plan = sand.plan_json()
    (change,) = plan["changes"]
    assert change["action"] == "update" and [f["field"] for f in change["fields"]] == ["cpus"]
    assert any("protection was set outside sand" in w for w in plan["warnings"])
    text = sand.run("plan").stdout
    assert "protect" not in text.split("sand will perform the following actions:")[1]
    assert "Warning: web-1 (pve, " in text
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = rig.vm(vmid).config
    assert str(config["protection"]) == "1" and str(config["cores"]) == "4"

    # Out of the manifest, it is still not deleted: blocked, exit 1.
    sand.write(rig.manifest([{"name": "web-2"}]))
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert rig.vm(vmid) is not None


# --- item 13: a listing that forgets is not believed -----------------------------------


def test_a_vm_missing_from_the_listing_is_checked_by_id_before_anything_is_made(
    tmp_path, fakepve_server
):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    sand.write(rig.manifest(THREE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    hidden = vmid_of(rig, "web-2")
    rig.leave_pool(hidden)  # the pool token can no longer see it
    rig.clear_log()

    proc = sand.run("plan", "--json")
    assert proc.returncode == 1, proc.stderr
    plan = json.loads(proc.stdout)
    reason = plan["unknown_backends"]["pve"]
    assert f"VM {hidden} (web-2)" in reason and "still exists" in reason
    assert [c["action"] for c in plan["changes"]] == ["blocked"] * 3
    assert rig.requests("GET", "/cluster/nextid")[0].query == {"vmid": str(hidden)}

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert f"VM {hidden} (web-2)" in proc.stdout + proc.stderr
    assert rig.count("POST", contains="/clone") == 0
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2", "web-3"]
    assert rig.vm(hidden) is not None and rig.vm(hidden).config.get("tags")


@pytest.mark.parametrize("how", ["out of the pool", "token lost every right"])
def test_a_listing_that_shows_none_of_the_recorded_vms_duplicates_nothing(
    how, tmp_path, fakepve_server
):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    sand.write(rig.manifest(THREE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    if how == "out of the pool":  # the template stays visible: a clone would succeed
        for vm in rig.vms():
            rig.leave_pool(vm.vmid)
    else:
        rig.revoke_all(rig.token_id)
    rig.clear_log()

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert "shows none of the 3 VMs sand recorded" in proc.stdout + proc.stderr
    assert rig.count("POST", contains="/clone") == 0
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2", "web-3"]


def test_a_vm_confirmed_gone_by_its_id_is_made_again(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = host(tmp_path, "a")
    sand.write(rig.manifest(THREE))
    assert sand.run("apply", "--auto-approve").returncode == 0
    gone = vmid_of(rig, "web-1")
    rig.run(lambda: (rig.pve.vms.remove(rig.pve.vm(gone)), rig.pve._pool_leave(gone)))

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["web-1", "web-2", "web-3"]
    assert sand.run("plan", "--detailed-exitcode").returncode == 0
    inventory = json.loads((sand.state_dir / "projects" / "demo" / "inventory.json").read_text())
    assert sorted(r["name"] for r in inventory["vms"]) == ["web-1", "web-2", "web-3"]
    mode = (sand.state_dir / "projects" / "demo" / "inventory.json").stat().st_mode & 0o777
    assert mode == 0o600
