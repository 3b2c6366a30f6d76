"""Idle VMs on Proxmox: a real guest behind a fakepve VM (its guest agent reports the
address of a netns sshd), provisioned by a real `sand apply`; idle decided from what
that guest tells in the deep check's exchange, carried out as PVE's suspend to disk,
and undone by `sand shell`, which resumes it first and says so.

The idle window is made of data, not waited out: the agents' state file says when each
session stopped working, and fakepve's uptime says when the VM booted.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.helpers import Sand
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.e2e.test_idle_presence import session, ssh_argv
from tests.provision.e2e_helpers import stand_in_agents

pytestmark = pytest.mark.e2e

STATE = ".local/state/sand/agents.json"
HOURS = 3600


def write_agents(guest, state: str, hours_ago: float) -> None:
    """The agents' state file as the hooks write it, one session in ``state`` since then."""
    since = int(time.time() - hours_ago * HOURS)
    record = {"agent": "claude", "session": "s1", "state": state, "since": since}
    doc = {"v": 1, "sessions": [{**record, "at": since, "cwd": "/home/claude/src"}]}
    path = f"/home/{guest.user}/{STATE}"
    home = f"/home/{guest.user}"
    script = f"mkdir -p $(dirname {path}) && cat > {path} && chown -R {guest.user} {home}/.local"
    guest.run_root(["sh", "-c", script], input=json.dumps(doc).encode(), check=True)


def tasks(rig, vmid: int) -> list[tuple[str, str]]:
    """fakepve's task log for ``vmid``: (type, exit status), oldest first."""
    return rig.run(
        lambda: [
            (t["type"], t.get("exitstatus", "")) for t in rig.pve.tasklog if t["id"] == str(vmid)
        ]
    )


def test_an_idle_vm_hibernates_to_disk_and_sand_shell_resumes_it(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    sand = Sand(tmp_path)
    manifest = rig.manifest(
        [{"name": "agent-1", "idle": {"after": "2h", "keepMemory": True}}],
        defaults={"provision": True},
        identity=str(guest.client_key_path),
        derive_bases=False,
    )
    sand.write(manifest)
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    with AgentAnswers(rig, {"agent-1": guest}):
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    vmid = rig.vms_named("agent-1")[0].vmid
    rig.set_uptime(vmid, 5 * HOURS)

    # A working agent is never put to sleep, however long ago it started working.
    write_agents(guest, "working", hours_ago=4)
    rig.clear_log()
    proc = sand.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    # What asking the guest cost: its endpoint (the VM's config, its agent's addresses)
    # beside the one listing; the exchange itself is the deep check's one SSH session.
    assert [str(r) for r in rig.log] == [
        "GET /cluster/resources?type=vm -> 200",
        f"GET /nodes/pve1/qemu/{vmid}/config -> 200",
        f"GET /nodes/pve1/qemu/{vmid}/agent/network-get-interfaces -> 200",
    ]
    # A shell attached (an SSH session open) keeps it awake too.
    write_agents(guest, "done", hours_ago=3)
    with session(ssh_argv(guest, "sleep", "120")):
        deadline = time.monotonic() + 30
        while guest.run_root(["pgrep", "-x", "sleep"]).returncode and time.monotonic() < deadline:
            time.sleep(0.2)  # the session is open once its command runs
        proc = sand.run("plan", "--detailed-exitcode", env=env)
        assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr

    # Idle for the whole window: the plan says so, and apply hibernates it.
    proc = sand.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "# agent-1 (pve, " in proc.stdout and "will go to sleep" in proc.stdout
    assert "~ power running -> suspended (idle 3h" in proc.stdout
    assert ": no agent working, no shell attached)" in proc.stdout
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
    assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/suspend -> 200"]
    vm = rig.vm(vmid)
    assert (vm.status, vm.lock) == ("stopped", "suspended")
    assert str(vm.config["vmstate"]).startswith(f"local-lvm:vm-{vmid}-state-suspend-")
    assert tasks(rig, vmid)[-1] == ("qmsuspend", "OK")

    # Asleep is in sync: no change planned, `state: running` holds, status says why.
    proc = sand.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    proc = sand.run("status", "--json", env=env)
    row = json.loads(proc.stdout)["vms"][0]
    assert row["conditions"]["Synced"] is True and row["conditions"]["Healthy"] is True
    assert row["asleep"]["how"] == "suspended" and row["observed"]["power"] == "suspended"
    proc = sand.run("status", env=env)
    assert "True (asleep)" in proc.stdout

    # A use wakes it first, saying so; PVE resumes it from its saved state.
    rig.clear_log()
    proc = sand.run("shell", "agent-1", "--", "true", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "waking agent-1, asleep since " in proc.stderr and "(suspended)" in proc.stderr
    posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
    assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/resume -> 200"]
    vm = rig.vm(vmid)
    assert (vm.status, vm.lock, "vmstate" in vm.config) == ("running", None, False)
    assert tasks(rig, vmid)[-1] == ("qmresume", "OK")
    # Awake and just resumed: its window starts again.
    proc = sand.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
