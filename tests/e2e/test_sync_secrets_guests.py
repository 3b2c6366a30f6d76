"""`sand sync` delivers a secret the host maps, into a real guest, and nowhere else.

The repository's manifest only names the secret; the host's ``secrets.yaml`` in
--host-dir says where its value is. The real ``sand sync`` follows the real git
server over HTTPS, fakepve holds the VM and a real sshd in its own network namespace
is its guest. The canary is looked for in the guest (only its tmpfs may hold it),
every argv on the host and in the guest, the sync's output and state, and the VM's
config."""

from __future__ import annotations

import shutil

import pytest

from tests.cli.sync_rig import Repo, https_git, private_file
from tests.cli.test_sync import GIT_TOKEN, start_sync, vm_manifest
from tests.e2e.test_apply_proxmox_guests import AgentAnswers, everything_under
from tests.provision.e2e_helpers import scoped_env, stand_in_agents
from tests.rig.argv import ArgvWatch

pytestmark = pytest.mark.e2e

CANARY = "canary-sync-host-mapped-2e7b90"
# Where a delivered secret may live in the guest: tmpfs only, gone with a reboot.
TMPFS = ("/run/", "/dev/shm/")


def test_a_host_mapped_secret_reaches_the_guest_tmpfs_only(
    tmp_path, fakepve_server, netns_guest, fakepve_rig_pki, monkeypatch
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    host_dir = rig.workdir
    for suffix in ("", ".pub"):  # the key the guest trusts, where the manifest names it
        key = guest.client_key_path.with_name(guest.client_key_path.name + suffix)
        shutil.copy(key, host_dir / f"guest_ed25519{suffix}")
    (host_dir / "guest_ed25519").chmod(0o600)
    private_file(host_dir / "api.token", CANARY + "\n")
    (host_dir / "secrets.yaml").write_text("secrets:\n  API_TOKEN:\n    from: {file: api.token}\n")
    data = vm_manifest(
        rig, [{"name": "agent-1", "secrets": [{"name": "API_TOKEN", "scope": "~/work"}]}]
    )
    data["defaults"] = {"provision": True}
    data["backends"]["pve"]["identity"] = "guest_ed25519"  # type: ignore[index]
    data["secrets"] = {"API_TOKEN": {}}  # named only: the host says where it is
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}

    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as git:
        repo = Repo(git, "fleet", data)
        head = repo.head()
        with AgentAnswers(rig, {"agent-1": guest}), ArgvWatch(guest, host=True) as watch:
            sync = start_sync(tmp_path, rig, repo, "--interval", "0.5", env=env)
            try:
                sync.wait_for(lambda: sync.said("applied (converged)"), timeout=300)
            finally:
                sync.stop()
    assert f"revision {head[:12]} applied (converged)" in sync.text()
    assert scoped_env(guest, "~/work", "API_TOKEN") == CANARY
    assert not scoped_env(guest, "~", "API_TOKEN")

    # Only the guest's tmpfs holds it; not one argv, output, state file or VM config.
    held = _files_holding(guest, CANARY)
    assert held and all(path.startswith(TMPFS) for path in held), held
    assert watch.samples > 10 and watch.containing(CANARY) == []
    assert CANARY not in sync.text() and CANARY not in everything_under(sync.state_dir)
    for vm in rig.vms():
        assert CANARY not in str(vm.config), vm.name


def _files_holding(guest, text: str) -> list[str]:
    """Every file in the guest holding ``text`` (grep reads the pattern from stdin: not
    in its argv either, where another test's watch of every process would see it)."""
    script = "grep -rlsF -f - /home /root /etc /var /tmp /opt /usr/local /srv /run /dev/shm || true"
    result = guest.run_root(["sh", "-c", script], input=(text + "\n").encode())
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().split()
