"""`sand sync --metrics` exports what a real guest's agents report: fakepve holds the VM,
a netns sshd is its guest, the real sync provisions it, and a Claude Code hook fired
in the guest shows as ``sand_agent_sessions{vm,agent,state}`` and
``sand_agent_idle_seconds{vm}`` at the next run. After the first read the guest's
endpoint is remembered: later reads ask fakepve nothing more."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request

import pytest

from tests.cli.sync_rig import Repo, free_port, https_git
from tests.cli.test_sync import GIT_TOKEN, start_sync, vm_manifest
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.provision.e2e_helpers import stand_in_agents

pytestmark = pytest.mark.e2e

HOOK = "python3 -I /usr/local/lib/sand/bundle/agent-state claude"


def ok_runs(text: str) -> float:
    found = re.search(r'sand_sync_runs_total\{result="ok"\} ([0-9.]+)', text)
    return float(found.group(1)) if found else 0.0


def test_agent_sessions_and_idle_seconds_are_exported(
    tmp_path, fakepve_server, netns_guest, fakepve_rig_pki, monkeypatch
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    for suffix in ("", ".pub"):  # the key the guest trusts, where the manifest names it
        key = guest.client_key_path.with_name(guest.client_key_path.name + suffix)
        shutil.copy(key, rig.workdir / f"guest_ed25519{suffix}")
    (rig.workdir / "guest_ed25519").chmod(0o600)
    data = vm_manifest(rig, [{"name": "agent-1"}])
    data["defaults"] = {"provision": True}
    data["backends"]["pve"]["identity"] = "guest_ed25519"  # type: ignore[index]
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    port = free_port()

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    def hook(event: str) -> None:
        body = {"hook_event_name": event, "session_id": "c-1", "cwd": "/tmp"}
        line = f"cd ~ && {HOOK}"
        guest.run_root(
            ["runuser", "-l", guest.user, "-c", line], input=json.dumps(body).encode(), check=True
        )

    def lookups() -> int:
        return sum(1 for r in rig.log if r.path.endswith("/agent/network-get-interfaces"))

    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as git:
        repo = Repo(git, "fleet", data)
        with AgentAnswers(rig, {"agent-1": guest}):
            sync = start_sync(
                tmp_path, rig, repo, "--interval", "0.5", "--metrics", f"127.0.0.1:{port}", env=env
            )
            try:
                sync.wait_for(lambda: sync.said("applied (converged)"), timeout=300)
                hook("UserPromptSubmit")
                working = 'sand_agent_sessions{agent="claude",state="working",vm="agent-1"} 1.0'
                sync.wait_for(lambda: working in scrape())
                assert 'sand_agent_idle_seconds{vm="agent-1"} 0.0' in scrape()
                hook("Stop")
                sync.wait_for(lambda: 'state="done",vm="agent-1"} 1.0' in scrape())
                text = scrape()
                assert 'state="working"' not in text  # the gauge holds the last read only
                idle = re.search(r'sand_agent_idle_seconds\{vm="agent-1"\} ([0-9.]+)', text)
                assert idle is not None and 0 <= float(idle.group(1)) < 60
                # Runs go on every half second; the endpoint is not asked for again.
                before, runs = lookups(), ok_runs(scrape())
                sync.wait_for(lambda: ok_runs(scrape()) >= runs + 3, timeout=60)
                assert before > 0 and lookups() == before
            finally:
                sync.stop()
