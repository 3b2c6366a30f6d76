"""Idle VMs on Lima: a netns guest behind the limactl stand-in, provisioned by a real
`sand apply`. Lima cannot suspend: an idle instance is stopped (the plan says what a
stop loses), stays in sync while asleep, and `sand shell` starts it again first. A stop
sand did not make (a person's `limactl stop`) stays drift, never "asleep".

The idle window is data: the agents' state file's `since`, and the host agent's start
(``ha.pid``'s mtime, what sand reads as the boot) set hours back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sand.backends.lease import LeaseHolder
from sand.project import open_session
from sand.survey.health import HEALTH_SCRIPT
from tests.e2e.test_agent_state import HEAD, STATE, Fleet
from tests.e2e.test_apply_proxmox_guests import empty_tmpfs_secrets
from tests.e2e.test_idle_presence import presence as presence_of
from tests.e2e.test_idle_presence import session, ssh_argv, until
from tests.e2e.test_idle_proxmox import HOURS, write_agents
from tests.provision.e2e_helpers import scoped_env

pytestmark = pytest.mark.e2e

MANIFEST = HEAD + "  - name: dev-1\n    agents: [claude]\n    idle: {after: 30m}\n"


def booted_hours_ago(fleet: Fleet, hours: float) -> None:
    when = time.time() - hours * HOURS
    os.utime(fleet.standin.instance_dir("dev-1") / "ha.pid", (when, when))


def status_of(fleet: Fleet) -> str:
    return str(fleet.standin.list_json("dev-1")[0]["status"])


def test_an_idle_lima_vm_stops_and_sand_shell_starts_it(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, MANIFEST)
    booted_hours_ago(fleet, 5)
    write_agents(guest, "needs-input", hours_ago=2)
    # Waiting for a person: Lima cannot suspend, and a stop would lose the question.
    proc = fleet.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr

    write_agents(guest, "done", hours_ago=2)
    proc = fleet.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "~ power running -> stopped (idle 2h" in proc.stdout
    assert "a stop ends running processes and tmux sessions; files and the agents' " in proc.stdout
    fleet.standin.clear_log()
    proc = fleet.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stop" in fleet.standin.commands() and status_of(fleet) == "Stopped"

    proc = fleet.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    proc = fleet.sand("status", "--json")
    row = json.loads(proc.stdout)["vms"][0]
    assert row["asleep"]["how"] == "stopped" and row["conditions"]["Synced"] is True
    # The record is beside the instance (a sidecar next to sand's marker): another host
    # driving the same Lima host (its own state dir here) reads the same sleep.
    mark = json.loads((fleet.standin.instance_dir("dev-1") / "sand-asleep.json").read_text())
    assert (mark["how"], mark["by"]) == ("stopped", "idle")
    other = {**fleet.env, "SAND_STATE_DIR": str(tmp_path / "other-host")}
    proc = subprocess.run([sys.executable, "-m", "sand", "status", "--json"], cwd=tmp_path,
                          env=other, capture_output=True, text=True, check=True)  # fmt: skip
    # The JSON gives the mark's time as every time in it: ISO 8601 in UTC.
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mark["since"]))
    assert json.loads(proc.stdout)["vms"][0]["asleep"] == {**mark, "since": since}

    fleet.standin.clear_log()
    proc = fleet.sand("shell", "dev-1", "--", "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "waking dev-1, asleep since " in proc.stderr and "(stopped)" in proc.stderr
    assert "start" in fleet.standin.commands() and status_of(fleet) == "Running"
    assert (fleet.standin.instance_dir("dev-1") / "sand-asleep.json").read_text() == "{}"
    proc = fleet.sand("plan", "--detailed-exitcode")
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    assert "will go to sleep" not in proc.stdout  # just woken: its window starts again

    # A person's stop is not sleep: it is drift, planned back to running.
    fleet.standin.run("stop", "dev-1")
    proc = fleet.sand("status", "--json")
    row = json.loads(proc.stdout)["vms"][0]
    assert "asleep" not in row and row["conditions"]["Healthy"] is False
    proc = fleet.sand("shell", "dev-1", "--", "true")
    assert proc.returncode == 1 and "waking" not in proc.stderr
    assert "it must be running" in proc.stderr


CANARY = "canary-7c1e-woken-secret"


def test_a_vm_woken_from_a_stop_gets_its_secrets_again(
    tmp_path: Path, netns_guest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_TEST_API_TOKEN", CANARY)
    text = HEAD.replace(
        "vms:\n", "secrets:\n  API_TOKEN: {from: {env: SAND_TEST_API_TOKEN}}\nvms:\n"
    )
    text += (
        "  - name: dev-1\n    agents: [claude]\n    secrets: [{name: API_TOKEN, scope: ~/work}]\n"
    )
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, text)
    assert scoped_env(guest, "~/work", "API_TOKEN") == CANARY

    assert "(stopped)" in fleet.sand("sleep", "dev-1").stdout
    empty_tmpfs_secrets(guest)  # what the stop did to the guest's tmpfs
    proc = fleet.sand("shell", "dev-1", "--", "true")
    assert proc.returncode == 0 and "waking dev-1" in proc.stderr, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/work", "API_TOKEN") == CANARY

    # A secret this shell cannot read: the wake and the use go on, the person is told.
    assert "(stopped)" in fleet.sand("sleep", "dev-1").stdout
    empty_tmpfs_secrets(guest)
    fleet.env.pop("SAND_TEST_API_TOKEN")
    proc = fleet.sand("shell", "dev-1", "--", "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dev-1: its secrets were not delivered again" in proc.stderr
    assert "the next sand apply delivers them" in proc.stderr and CANARY not in proc.stderr


async def test_a_wake_waits_for_the_lease_of_an_applier_at_work(
    tmp_path: Path, netns_guest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync elsewhere holds the project's lease (it may be carrying out a plan for this
    very VM): `sand wake` waits for it, saying who holds it, and wakes the VM only once
    the lease is its own -- as an apply would."""
    fleet = Fleet(tmp_path, netns_guest(), MANIFEST)
    assert "(stopped)" in fleet.sand("sleep", "dev-1").stdout
    for key, value in fleet.env.items():
        monkeypatch.setenv(key, value)
    session = open_session(tmp_path / "sand.yaml", lock=False)
    try:
        holder = LeaseHolder.here(command="sync", revision="f00d")
        async with session.backends["laptop"].lease(holder, ttl=60):
            fleet.standin.clear_log()
            proc = subprocess.Popen(
                [sys.executable, "-m", "sand", "wake", "dev-1"], cwd=tmp_path, env=fleet.env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert proc.stderr is not None
            said = await asyncio.to_thread(proc.stderr.readline)
            assert said.startswith("waiting (up to 120s): project agentse2e is being applied by ")
            assert "revision f00d" in said and "(its lease on backend laptop)" in said
            await asyncio.sleep(1.0)
            assert "start" not in fleet.standin.commands() and status_of(fleet) == "Stopped"
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    finally:
        await session.close()
    assert proc.returncode == 0, out + err
    assert "waking dev-1, asleep since " in err and "dev-1 is awake" in out
    assert "start" in fleet.standin.commands() and status_of(fleet) == "Running"


def test_an_agents_file_that_cannot_be_read_is_unknown_and_never_sleeps(
    tmp_path: Path, netns_guest
) -> None:
    """An agents' state file that is not JSON, not readable by the VM's user, or a link
    is not "no agent": the plan does not put the VM to sleep and says why (issue 36,
    item 6a). The same guest, its file read whole, is put to sleep."""
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, MANIFEST)
    booted_hours_ago(fleet, 5)
    path = f"/home/{guest.user}/.local/state/sand/agents.json"
    write_agents(guest, "done", hours_ago=2)
    proc = fleet.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 2 and "~ power running -> stopped (idle 2h" in proc.stdout

    spoilt = {
        "not JSON": f"printf '{{not json' > {path}",
        "not readable": f"chmod 000 {path}",
        "a link": f"ln -sf /etc/hostname {path}",
        "a record left out": f"""printf '{{"sessions": [{{"agent": "claude"}}]}}' > {path}""",
    }
    for how, spoil in spoilt.items():
        write_agents(guest, "done", hours_ago=2)
        guest.run_root(["sh", "-c", f"rm -f {path} && touch {path} && {spoil}"], check=True)
        proc = fleet.sand("plan", "--detailed-exitcode")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "No changes." in proc.stdout, (how, out)
        assert "dev-1 (laptop) is not put to sleep: what its agents do is unknown (" in out, how
        plan = json.loads(fleet.sand("plan", "--json").stdout)
        assert not [c for c in plan["changes"] if c["action"] != "no-op"], how
        assert any("is not put to sleep" in w for w in plan["warnings"]), (how, plan)


def test_sand_sleep_refuses_a_vm_in_use_naming_who_unless_forced(
    tmp_path: Path, netns_guest
) -> None:
    """`sand sleep` asks the guest first: a working agent, an SSH session, a tmux client
    attached each refuse it, by name (agent and session, user@tty), and --force stops it
    all the same (issue 36, item 6b). The guest is the netns sshd behind the stand-in."""
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, MANIFEST)
    write_agents(guest, "working", hours_ago=0)
    proc = fleet.sand("sleep", "dev-1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "not putting dev-1 to sleep: in use by claude session s1 (working); --force to stop "
        "it anyway" in proc.stderr
    ), proc.stderr
    assert "Traceback" not in proc.stderr
    assert status_of(fleet) == "Running" and "stop" not in fleet.standin.commands()

    write_agents(guest, "done", hours_ago=0)
    user = guest.user
    install = ["sh", "-c", "cat > /tmp/sand-health"]  # what presence_of runs over SSH
    guest.run_root(install, input=HEALTH_SCRIPT.encode(), check=True)
    with session(ssh_argv(guest, "sleep", "120")):
        until(lambda: presence_of(guest), lambda p: p.ssh_sessions == 1)
        proc = fleet.sand("sleep", "dev-1")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"in use by {user}@notty (SSH); --force" in proc.stderr, proc.stderr
    with session(ssh_argv(guest, "tmux", "new-session", "-A", "-s", "dev-1", tty=True)):
        until(lambda: presence_of(guest), lambda p: p.tmux_clients == 1)
        proc = fleet.sand("sleep", "dev-1")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        said = re.search(r"in use by (.*); --force", proc.stderr)
        assert said is not None, proc.stderr
        assert re.fullmatch(rf"{user}@pts/\d+ \(SSH\), a tmux client on /dev/pts/\d+", said[1]), (
            said[1]
        )
        assert status_of(fleet) == "Running"
        proc = fleet.sand("sleep", "--force", "dev-1")
        assert proc.returncode == 0 and "(stopped)" in proc.stdout, proc.stdout + proc.stderr
    assert status_of(fleet) == "Stopped"

    assert fleet.sand("wake", "dev-1").returncode == 0
    until(lambda: presence_of(guest), lambda p: not p.ssh_sessions and not p.tmux_clients)
    proc = fleet.sand("sleep", "dev-1")  # nobody, no agent working: it sleeps
    assert proc.returncode == 0 and "(stopped)" in proc.stdout, proc.stdout + proc.stderr


def test_a_codex_session_is_unknown_so_its_vm_never_sleeps_on_it(
    tmp_path: Path, netns_guest
) -> None:
    """Codex's notify program is called only when a turn ends, so its session's `done`
    does not say no new turn runs: the idle plan, and `sand sleep`, take it as unknown
    (issue 36, item 6d). The session is what the provisioned notify hook writes."""
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, MANIFEST.replace("agents: [claude]", "agents: [claude, codex]"))
    booted_hours_ago(fleet, 5)
    fleet.as_user("mkdir -p ~/work")
    fleet.codex_notify({"type": "agent-turn-complete", "thread-id": "x-1", "cwd": "~/work"})
    (session_,) = fleet.guest_file()
    assert (session_["agent"], session_["state"]) == ("codex", "done")
    # Its turn ended two hours ago, as far as the file tells.
    path = f"/home/{guest.user}/{STATE}"
    doc = json.loads(guest.read_file(path))
    for record in doc["sessions"]:
        record["since"] = record["at"] = int(time.time() - 2 * HOURS)
    guest.run_root(["sh", "-c", f"cat > {path}"], input=json.dumps(doc).encode(), check=True)

    proc = fleet.sand("plan", "--detailed-exitcode")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "No changes." in proc.stdout, out
    assert (
        "dev-1 (laptop) is not put to sleep: what its agents do is unknown (codex session x-1"
        in out
    )
    proc = fleet.sand("sleep", "dev-1")
    assert proc.returncode == 1 and "its agents are unknown: codex session x-1" in proc.stderr
    assert status_of(fleet) == "Running"
