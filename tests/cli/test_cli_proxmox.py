"""The command line end to end against fakepve: plan, apply, idempotence,
exit codes, saved plans, mass-delete guard, status and destroy.

Assertions read fakepve's own state and request log, not sand's output alone.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.helpers import Sand

VMS = [{"name": "web-1"}, {"name": "web-2", "memory": "2GiB"}]


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest(VMS))
    return s


def names(rig):
    return sorted(vm.name for vm in rig.vms())


def test_plan_then_apply_then_noop(sand, fakepve_server):
    rig = fakepve_server
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stderr
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in proc.stdout
    assert '+ vm "web-1" {' in proc.stdout
    assert names(rig) == []  # plan changed nothing

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Apply complete! Resources: 2 added, 0 changed, 0 destroyed" in proc.stdout
    assert names(rig) == ["web-1", "web-2"]
    web2 = rig.vms_named("web-2")[0]
    assert int(web2.config["memory"]) == 2048

    rig.clear_log()
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout
    listing = rig.count("GET", "/cluster/resources")
    assert listing == 1
    assert rig.count(contains="/agent/") == 0
    # no deep reads on a no-op
    assert rig.count(contains="/config") == rig.count(contains="/pending") == 0

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0 and "No changes." in proc.stdout
    assert names(rig) == ["web-1", "web-2"]


def test_apply_without_a_terminal_or_approval_refuses_and_changes_nothing(sand, fakepve_server):
    proc = sand.run("apply")
    assert proc.returncode == 1
    assert "--auto-approve" in proc.stderr
    assert names(fakepve_server) == []


def test_piped_yes_is_not_a_confirmation(sand, fakepve_server):
    # stdin is a pipe, not a terminal: refused before asking, whatever it holds.
    proc = sand.run("apply", stdin="yes\n")
    assert proc.returncode == 1
    assert names(fakepve_server) == []


def run_on_terminal(sand: Sand, answer: str) -> tuple[int, str]:
    """`sand apply` with a real pseudo-terminal as stdin/stdout, answering the prompt."""
    import os
    import pty
    import subprocess
    import sys
    import time

    main, side = pty.openpty()
    env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sand", "apply"],
        stdin=side,
        stdout=side,
        stderr=side,
        cwd=sand.workdir,
        env=env,
        close_fds=True,
    )
    os.close(side)
    seen = b""
    deadline = time.monotonic() + 60
    while b"Enter a value:" not in seen and time.monotonic() < deadline:
        seen += os.read(main, 4096)
    os.write(main, answer.encode() + b"\n")
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            seen += os.read(main, 4096)
        except OSError:
            break
    proc.wait(timeout=60)
    os.close(main)
    return proc.returncode, seen.decode(errors="replace")


def test_on_a_terminal_only_yes_applies(sand, fakepve_server):
    code, screen = run_on_terminal(sand, "y")
    assert code == 1 and "Apply cancelled." in screen
    assert names(fakepve_server) == []
    code, screen = run_on_terminal(sand, "yes")
    assert code == 0, screen
    assert names(fakepve_server) == ["web-1", "web-2"]


def test_memory_change_is_one_update_in_place(sand, fakepve_server):
    rig = fakepve_server
    assert sand.run("apply", "--auto-approve").returncode == 0
    before = {vm.name: vm.vmid for vm in rig.vms()}
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "web-2", "memory": "4GiB"}]))
    plan = sand.plan_json()
    actions = {c["vm"]: c["action"] for c in plan["changes"]}
    assert actions == {"web-1": "no-op", "web-2": "update"}
    assert plan["summary"]["change"] == 1
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {vm.name: vm.vmid for vm in rig.vms()} == before  # same machines
    assert int(rig.vms_named("web-2")[0].config["memory"]) == 4096
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


def test_removing_an_entry_deletes_only_that_vm(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([*VMS, {"name": "web-3"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest(VMS))
    # No guest behind it to sweep: the guard is tested in test_guard.py.
    proc = sand.run("apply", "--auto-approve", "--allow-data-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 destroyed" in proc.stdout
    assert names(rig) == ["web-1", "web-2"]


def test_mass_delete_needs_the_flag(sand, fakepve_server):
    rig = fakepve_server
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([]))
    proc = sand.run("apply", "--auto-approve", "--allow-data-loss")
    assert proc.returncode == 1
    assert "--allow-mass-delete" in proc.stderr
    assert names(rig) == ["web-1", "web-2"]
    proc = sand.run("apply", "--auto-approve", "--allow-mass-delete", "--allow-data-loss")
    assert proc.returncode == 0, proc.stderr
    assert names(rig) == []


def test_saved_plan_applies_once_and_refuses_when_stale(sand, fakepve_server):
    rig = fakepve_server
    plan_file = sand.workdir / "create.plan"
    assert sand.run("plan", "--out", str(plan_file)).returncode == 0
    proc = sand.run("apply", str(plan_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert names(rig) == ["web-1", "web-2"]
    # The same saved plan again: the world moved (it was made against an empty
    # pool), so it must refuse instead of creating duplicates.
    proc = sand.run("apply", str(plan_file))
    assert proc.returncode == 1
    assert "stale" in proc.stderr or "differs" in proc.stderr
    assert names(rig) == ["web-1", "web-2"]


def test_invalid_manifest_touches_nothing(sand, fakepve_server):
    rig = fakepve_server
    rig.clear_log()
    text = sand.manifest.read_text().replace("name: web-2", "name: web_2")
    sand.manifest.write_text(text)
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert "sand.yaml:" in proc.stderr and "not valid on Proxmox" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert rig.log == []


def test_status_reports_conditions(sand, fakepve_server):
    assert sand.run("apply", "--auto-approve").returncode == 0
    proc = sand.run("status", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["unknown_backends"] == []
    rows = {r["vm"]: r for r in report["vms"]}
    assert set(rows) == {"web-1", "web-2"}
    for row in rows.values():
        assert row["conditions"]["Synced"] is True
        assert row["conditions"]["Healthy"] is True
        assert row["last_reconcile"]
        assert row["observed"]["power"] == "running"


def test_destroy_keeps_protected_vms(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "keep", "protect": True}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert str(rig.vms_named("keep")[0].config.get("protection")) == "1"
    # No guest behind it to sweep: the guard is tested in test_guard.py.
    proc = sand.run("destroy", "--auto-approve", "--allow-data-loss")
    # The rest is destroyed, but the protected VM is not: not converged, exit 1.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert names(rig) == ["keep"]
    assert "protected" in proc.stdout
    # Both are in the manifest: destroy deletes them because it was asked to.
    assert "not in the manifest" not in proc.stdout, proc.stdout
    assert "#   sand destroy deletes every VM of the project\n" in proc.stdout
    assert "sand destroy deletes every VM of the project, but protected" in proc.stdout
    assert "Not converged: keep blocked." in proc.stderr


def test_json_logs_are_json(sand, fakepve_server):
    proc = sand.run("--log-format", "json", "--log-level", "info", "apply", "--auto-approve")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert any(e.get("event") == "progress" and e.get("step") == "done" for e in events)


def test_each_vm_reports_typed_phases_with_their_own_clock(sand, fakepve_server):
    # The engine emits (vm, phase, detail, elapsed) events; the JSON view carries them.
    proc = sand.run("--log-format", "json", "--log-level", "info", "apply", "--auto-approve")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    steps = [e for e in events if e.get("event") == "progress"]
    assert steps, proc.stderr
    by_vm: dict[str, list[dict]] = {}
    for e in steps:
        by_vm.setdefault(e["vm"], []).append(e)
    for vm, seen in by_vm.items():
        phases = [e["phase"] for e in seen]
        assert phases[0] == "creating" and phases[-1] == "done", (vm, phases)
        assert "recording" in phases, (vm, phases)
        assert all(e["backend"] == "pve" for e in seen)
        clock = [e["elapsed"] for e in seen]
        assert clock == sorted(clock) and clock[-1] > 0, (vm, clock)
    # The VMs the rig now holds are the ones that reported done.
    assert sorted(by_vm) == sorted(vm.name for vm in fakepve_server.vms())


def test_without_a_terminal_progress_is_timestamped_lines(sand, fakepve_server):
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if ": creating" in line]
    assert lines, proc.stderr
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \S+: creating$", line) for line in lines)


def test_an_unreachable_backend_is_an_error_not_no_changes(sand, fakepve_server):
    assert sand.run("apply", "--auto-approve").returncode == 0
    fakepve_server.fail("GET", "/cluster/resources", 403, "Permission check failed")
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "unknown" in proc.stdout and "Permission check failed" in proc.stdout
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert "Not converged: backend pve unknown" in proc.stderr
    assert names(fakepve_server) == ["web-1", "web-2"]  # nothing pruned on a blind run


def test_refresh_only_reports_drift_and_proposes_nothing(sand, fakepve_server):
    rig = fakepve_server
    assert sand.run("apply", "--auto-approve").returncode == 0
    vmid = rig.vms_named("web-1")[0].vmid
    rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))
    proc = sand.run("plan", "--refresh-only", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "web-1 (pve) has changed outside of sand" in proc.stdout
    assert "Plan:" not in proc.stdout
    proc = sand.run("plan", "--json")
    change = {c["vm"]: c for c in json.loads(proc.stdout)["changes"]}["web-1"]
    assert change["action"] == "update"
    assert change["drift"][0]["field"] == "cpus"
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert int(rig.vm(vmid).config["cores"]) == 2
