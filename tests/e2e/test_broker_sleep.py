"""A brokered VM that sleeps and wakes on Proxmox (issue 38): a real `sand apply` on
fakepve with a netns guest behind the VM and the rig's token-protected HTTPS git server.

Before PVE saves the guest's RAM the guest holds neither the token (it never does) nor
its broker credential (removed with the delivered secrets); the wake draws a new
credential, with which the guest pushes again, and the one the saved RAM could have
held is refused by the broker.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from tests.cli.helpers import Sand
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.e2e.test_broker_guests import _guest_holding
from tests.provision.e2e_helpers import as_user, stand_in_agents
from tests.rig.gitserver import GitServer
from tests.rig.guest import ensure_bridge
from tests.rig.tlscert import self_signed

pytestmark = pytest.mark.e2e

CREDENTIAL = "cat /run/user/*/sand/git/broker /dev/shm/sand-*/git/broker 2>/dev/null; true"
# git asked for a password gets the credential the guest saved before its sleep.
STALE = "!f() { echo username=x; printf 'password=%s\\n' \"$(cat ~/stale)\"; }; f"


def brokered_app(rig, guest, url: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A manifest of one provisioned VM ``entry`` on the fake, with repo ``app`` at ``url``
    checked out at ~/src/app through the broker (GH, from $SAND_TEST_GH: fetch it, push
    ``agent/*``)."""
    manifest: dict[str, Any] = rig.manifest(
        [{**entry, "repos": ["app"]}],
        defaults={"provision": True},
        identity=str(guest.client_key_path),
        derive_bases=False,
    )
    broker = {"repositories": [url], "push": ["agent/*"]}
    manifest["secrets"] = {
        "GH": {"from": {"env": "SAND_TEST_GH"}, "deliver": "broker", "broker": broker}
    }
    manifest["repos"] = {"app": {"url": url, "token": "GH", "path": "~/src/app"}}
    return manifest


def brokered_env(tmp_path, token: str, cert: str) -> dict[str, str]:
    """What sand's apply is run with for :func:`brokered_app`: the token's source, the
    git server's CA, the stand-in agents."""
    return {
        "SAND_TEST_GH": token,
        "SSL_CERT_FILE": cert,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }


def _push(guest, branch: str) -> None:
    script = (
        f"cd ~/src/app && git checkout -qB {shlex.quote(branch)} && date > w.txt && "
        "git add w.txt && git -c user.name=a -c user.email=a@b commit -qm w && "
        f"GIT_TERMINAL_PROMPT=0 git push -q origin {shlex.quote(branch)}"
    )
    done = as_user(guest, script)
    assert done.returncode == 0, done.stderr


def test_a_brokered_vm_sleeps_without_its_credential_and_wakes_with_a_new_one(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    cert, key = self_signed(tmp_path, ensure_bridge())
    server = GitServer("rig-sleep-brokered-8e2d41c07a", tls=(cert, key)).start()
    sand = Sand(tmp_path)
    env = brokered_env(tmp_path, server.token, cert)
    try:
        url = server.create_repo("app", {"README.md": "brokered sleep\n"})
        # keepMemory: a netns guest cannot zero its freed pages (no kernel of its own
        # to boot with init_on_free=1): without it the sleep would be a stop.
        idle = {"idle": {"after": "2h", "keepMemory": True}}
        sand.write(brokered_app(rig, guest, url, {"name": "agent-1", **idle}))
        with AgentAnswers(rig, {"agent-1": guest}):
            proc = sand.run("apply", "--auto-approve", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            _push(guest, "agent/before")
            before = guest.run_root(["sh", "-c", CREDENTIAL]).stdout.strip()
            assert before  # delivered: the checks below can fail

            vmid = rig.vms_named("agent-1")[0].vmid
            rig.clear_log()
            proc = sand.run("sleep", "agent-1", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            posts = [str(r) for r in rig.requests("POST", contains=f"/qemu/{vmid}/status/")]
            assert posts == [f"POST /nodes/pve1/qemu/{vmid}/status/suspend -> 200"], proc.stderr
            # What PVE saved: neither the token nor the broker credential.
            assert guest.run_root(["sh", "-c", CREDENTIAL]).stdout.strip() == b""
            assert _guest_holding(guest, server.token) == []
            assert _guest_holding(guest, before.decode()) == []

            proc = sand.run("wake", "agent-1", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            after = guest.run_root(["sh", "-c", CREDENTIAL]).stdout.strip()
            assert after and after != before
            _push(guest, "agent/after")
            assert {"agent/before", "agent/after"} <= set(server.branches("app"))

            # The credential the saved RAM could have held is refused, from the guest.
            save = "umask 077; cat > ~/stale"
            guest.run_root(["runuser", "-l", guest.user, "-c", save], input=before, check=True)
            stale = as_user(
                guest,
                "cd ~/src/app && GIT_TERMINAL_PROMPT=0 git -c credential.helper= "
                f"-c credential.helper={shlex.quote(STALE)} fetch -q origin",
            )
            assert stale.returncode != 0 and b"Authentication failed" in stale.stderr
            assert _guest_holding(guest, server.token) == []
            assert server.token not in proc.stdout + proc.stderr
    finally:
        server.stop()
        sand.run("destroy", "--auto-approve", "--allow-data-loss", env=env)
