"""Provisioning a full VM (qemu TCG, systemd as PID 1): the same guest
contract as on the netns rig, on a machine with its own kernel and init."""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING

import pytest

from sand.provision import provision
from tests.provision.e2e_helpers import as_user, endpoint, root, scoped_env, stand_in_agents
from tests.provision.helpers import make_vm, secret

if TYPE_CHECKING:
    from tests.rig.qemu import QemuGuest


pytestmark = [pytest.mark.e2e, pytest.mark.tcg]

# The session's VM is shared: provision a user of our own rather than reshape the login user.
USER = "sandq"


async def test_provision_a_qemu_guest_then_again_as_a_no_op(
    qemu_guest: QemuGuest, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    canary = f"canary-{secrets.token_hex(12)}"
    vm = make_vm(
        user=USER,
        agents=("claude", "codex"),
        packages=("procps",),
        secrets=(secret("API", "~/work", "API_KEY"),),
    )
    target = endpoint(qemu_guest, alias=f"qemu-{qemu_guest.id}")

    first = await provision(target, vm, {"API": canary})
    second = await provision(target, vm, {"API": canary})
    print(
        f"\nqemu TCG provision: first {first.seconds:.1f}s ({first.changed} steps changed), "
        f"second {second.seconds:.1f}s ({second.changed} changed)"
    )
    assert first.changed > 0
    assert second.changed == 0, second.changes

    uid = root(qemu_guest, "id", "-u", USER).strip()
    assert scoped_env(qemu_guest, "~/work", "API_KEY", user=USER) == canary
    assert scoped_env(qemu_guest, "~", "API_KEY", user=USER) is None
    # /run/user/UID when the user manager runs (logind); this image has no
    # logind, so sand falls back to /dev/shm -- tmpfs either way.
    candidates = [f"/run/user/{uid}/sand/env", f"/dev/shm/sand-{uid}/env"]
    (env_dir,) = [d for d in candidates if qemu_guest.run_root(["test", "-d", d]).returncode == 0]
    assert root(qemu_guest, "stat", "-f", "-c", "%T", env_dir).strip() == "tmpfs"
    files = root(qemu_guest, "find", env_dir, "-type", "f", "-printf", "%m %u\n").split("\n")
    assert [f for f in files if f] == [f"600 {USER}"]
    # Lingering keeps the user's runtime dir (and so the secrets) between logins.
    assert root(qemu_guest, "test", "-e", f"/var/lib/systemd/linger/{USER}") == ""
    assert as_user(qemu_guest, "sudo -n true", user=USER).returncode == 0

    settings = json.loads(root(qemu_guest, "cat", f"/home/{USER}/.claude/settings.json"))
    assert settings["skipDangerousModePermissionPrompt"] is True
    assert 'approval_policy = "never"' in root(
        qemu_guest, "cat", f"/home/{USER}/.codex/config.toml"
    )
    # The canary is on tmpfs only: nothing on the VM's disk holds it.
    grep = qemu_guest.run_root(
        ["grep", "-rlF", "--", canary, "/home", "/etc", "/var", "/tmp", "/root", "/usr/local"]
    )
    assert grep.returncode == 1, grep.stdout
