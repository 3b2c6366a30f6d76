"""SIGKILL `sand apply` while it provisions a real guest: the VM exists but
is not recorded as converged, so the next apply provisions it again (in
place, no second VM) and then plans no changes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, journal_records, step
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.provision.e2e_helpers import scoped_env, stand_in_agents

pytestmark = pytest.mark.e2e
TOKEN = "mid-provision-canary-0d9e"


def test_kill_mid_provision_then_converge(tmp_path, fakepve_server, netns_guest):
    rig = fakepve_server
    guest = netns_guest()
    sand = Sand(tmp_path)
    manifest = rig.manifest(
        [{"name": "p-1", "secrets": [{"name": "API_TOKEN", "scope": "~/w"}]}],
        defaults={"provision": True},
        identity=str(guest.client_key_path),
    )
    manifest["secrets"] = {"API_TOKEN": {"from": {"env": "SAND_TEST_TOKEN"}}}
    sand.write(manifest)
    env = {
        **env_for(sand.state_dir),
        "SAND_TEST_TOKEN": TOKEN,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    with AgentAnswers(rig, {"p-1": guest}):
        proc = subprocess.Popen(
            [sys.executable, "-m", "sand", "apply", "--auto-approve"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started = step("started")
        logins = guest.log_text().count("Accepted publickey")
        deadline = time.monotonic() + 120
        # The create is finished once the start step is journalled, and provisioning has
        # begun once the guest's sshd let sand in: kill while the guest is provisioned.
        while not (
            started(journal_records(journal))
            and guest.log_text().count("Accepted publickey") > logins
        ):
            assert proc.poll() is None, "apply ended before provisioning began"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        proc.kill()
        proc.wait()
    plan = json.loads(sand.run("plan", "--json", env=env).stdout)
    (change,) = plan["changes"]
    assert change["action"] in ("reprovision", "update"), change  # not recorded as converged
    with AgentAnswers(rig, {"p-1": guest}):
        again = sand.run("apply", "--auto-approve", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [vm.name for vm in rig.vms()] == ["p-1"]  # no second VM
    assert scoped_env(guest, "~/w", "API_TOKEN") == TOKEN
    final = sand.run("plan", "--detailed-exitcode", env=env)
    assert final.returncode == 0, final.stdout + final.stderr
