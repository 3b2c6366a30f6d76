"""Nothing secret at rest when a VM sleeps: a real `sand apply` on fakepve with a netns
guest behind the VM. Before PVE's suspend to disk saves the guest's RAM, the secrets sand
delivered are gone from the guest's tmpfs, and they are back once it wakes; a guest
whose running process holds a secret in its environment is stopped instead, unless the
manifest's ``idle: {keepMemory: true}`` allows saving it.

(That the values are gone from the guest's RAM itself, and not only its files, is shown
on a qemu guest's memory dump: ``tests/e2e/test_scrub_memory_qemu.py``.)
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.cli.helpers import Sand
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.e2e.test_idle_proxmox import HOURS, write_agents
from tests.provision.e2e_helpers import scoped_env, stand_in_agents

pytestmark = pytest.mark.e2e


def sand_for(tmp_path, rig, guest, idle: dict[str, object]) -> tuple[Sand, dict[str, str], str]:
    canary = f"canary-{secrets.token_hex(12)}"
    sand = Sand(tmp_path)
    manifest = rig.manifest(
        [{"name": "agent-1", "idle": idle, "secrets": [{"name": "API", "scope": "~/work"}]}],
        defaults={"provision": True},
        identity=str(guest.client_key_path),
        derive_bases=False,
    )
    manifest["secrets"] = {"API": {"from": {"env": "SAND_TEST_API"}}}
    sand.write(manifest)
    env = {
        "SAND_TEST_API": canary,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }
    return sand, env, canary


def canary_files(guest, canary: str) -> str:
    """Every file of the guest's tmpfs and home holding ``canary`` ("" when none)."""
    proc = guest.run_root(
        ["sh", "-c", 'grep -rlF -- "$1" /run/user /dev/shm /home 2>/dev/null; true', "-", canary]
    )
    return proc.stdout.decode().strip()


@contextlib.contextmanager
def process_with_secret(guest, canary: str) -> Iterator[None]:
    """A process of the guest's user with the secret in its environment, as a shell that
    entered the secret's scope has it (direnv exported it). Started outside any SSH
    session (an open one would keep the VM awake); the value travels on stdin."""
    script = (
        'read -r value; API=$value setsid runuser -u "$1" -- sleep 600 </dev/null >/dev/null 2>&1 &'
    )
    proc = guest.run_root(["sh", "-c", script, "-", guest.user], input=canary.encode() + b"\n")
    assert proc.returncode == 0, proc.stderr
    try:
        yield
    finally:
        guest.run_root(["pkill", "-u", guest.user, "-x", "sleep"])


def test_a_hibernation_saves_no_delivered_secret_and_the_wake_delivers_them_again(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    sand, env, canary = sand_for(tmp_path, rig, guest, {"after": "2h", "keepMemory": True})
    with AgentAnswers(rig, {"agent-1": guest}):
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/work", "API") == canary
    assert canary_files(guest, canary)  # delivered: the check below can fail
    vmid = rig.vms_named("agent-1")[0].vmid
    rig.set_uptime(vmid, 5 * HOURS)
    write_agents(guest, "done", hours_ago=3)

    proc = sand.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "~ power running -> suspended" in proc.stdout
    assert "removed before its memory is saved, delivered again at wake: API" in proc.stdout
    assert "its saved memory keeps (keepMemory): secret API" in proc.stdout
    assert canary not in proc.stdout + proc.stderr
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
    assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/suspend -> 200"]
    assert canary_files(guest, canary) == ""
    assert scoped_env(guest, "~/work", "API") is None

    # A use wakes it and delivers its secrets again before the command runs.
    proc = sand.run("shell", "agent-1", "--", "true", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "waking agent-1" in proc.stderr
    assert scoped_env(guest, "~/work", "API") == canary

    # A person's `sand sleep` scrubs the guest the same way before PVE saves its RAM.
    rig.clear_log()
    proc = sand.run("sleep", "agent-1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
    assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/suspend -> 200"]
    assert canary_files(guest, canary) == ""


def test_a_secret_a_running_process_holds_makes_the_sleep_a_stop(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    sand, env, canary = sand_for(tmp_path, rig, guest, {"after": "2h"})
    with AgentAnswers(rig, {"agent-1": guest}):
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    vmid = rig.vms_named("agent-1")[0].vmid
    rig.set_uptime(vmid, 5 * HOURS)

    with process_with_secret(guest, canary):
        # No agent session, no tmux server: the plan expects the guest to come clean.
        proc = sand.run("plan", env=env)
        assert "~ power running -> suspended" in proc.stdout, proc.stdout + proc.stderr
        rig.clear_log()
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # The guest said a process holds API: stopped, and its RAM saved nowhere.
    said = proc.stdout + proc.stderr
    assert "stopped, not hibernated: its memory holds " in said
    assert "API in a running process's environment" in said
    assert canary not in said
    posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
    assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/shutdown -> 200"]
    vm = rig.vm(vmid)
    assert (vm.status, vm.lock, "vmstate" in vm.config) == ("stopped", None, False)
    assert canary_files(guest, canary) == ""
    # This host's record of the sleep says what was done, not what the plan expected.
    [record] = json.loads(next(sand.state_dir.rglob("asleep.json")).read_text())["vms"]
    assert (record["name"], record["how"]) == ("agent-1", "stopped")

    proc = sand.run("wake", "agent-1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/work", "API") == canary


def test_a_memory_forks_snapshot_is_taken_of_a_source_rid_of_its_secrets(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guests = {"agent-1": netns_guest(), "try-1": netns_guest()}
    source = guests["agent-1"]
    key = source.client_public_key + "\n"
    for guest in guests.values():
        path = f"/home/{guest.user}/.ssh/authorized_keys"
        guest.run_root(["sh", "-c", f"cat >> {path}"], input=key.encode(), check=True)
    sand, env, canary = sand_for(tmp_path, rig, source, {"after": "2h"})
    with AgentAnswers(rig, guests):
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert canary_files(source, canary)  # delivered: the check below can fail
        manifest = yaml.safe_load(sand.manifest.read_text())
        manifest["vms"].append({"name": "try-1", "from": {"vm": "agent-1", "snapshot": "memory"}})
        sand.write(manifest)
        proc = sand.run("plan", env=env)
        assert "agent-1's memory is saved in the snapshot for the copy" in proc.stdout
        assert "secrets: its own entry's, delivered to it: API" in proc.stdout
        # The snapshot's task runs a while: what the source's tmpfs holds meanwhile is
        # what its saved RAM would.
        rig.set_task_secs("qmsnapshot", 2.0)
        rig.clear_log()
        seen: list[str] = []
        watcher = threading.Thread(target=_at_snapshot, args=(rig, source, canary, seen))
        watcher.start()
        # A process of the source holds the secret: its RAM is not saved at all (the
        # clone never gets a snapshot's RAM, so the fork loses nothing).
        with process_with_secret(source, canary):
            proc = sand.run("apply", "--auto-approve", env=env)
        watcher.join(timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seen == [""], "the source's tmpfs held the secret while its RAM was snapshotted"
    assert len(rig.requests("POST", contains="/snapshot")) == 1
    assert "snapshot without memory: agent-1's holds " in proc.stdout + proc.stderr
    # Given back to the source once the fork was made; the fork got its own entry's.
    assert scoped_env(source, "~/work", "API") == canary
    assert scoped_env(guests["try-1"], "~/work", "API") == canary


def _at_snapshot(rig, guest, canary: str, seen: list[str]) -> None:
    """Once the snapshot is asked for, what of ``canary`` the guest's files hold."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if rig.requests("POST", contains="/snapshot"):
            seen.append(canary_files(guest, canary))
            return
        time.sleep(0.05)
