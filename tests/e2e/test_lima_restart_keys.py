"""A Lima guest makes new SSH host keys at every start (cloud-init sees a new
instance-id): a restart, even behind sand's back, must not lock anyone out, while a
key that changes without a start is still refused."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.test_apply_lima_guests import SECRET, Cli
from tests.provision.e2e_helpers import scoped_env

pytestmark = pytest.mark.e2e


def test_a_restart_behind_sands_back_is_reached_and_a_key_changed_without_one_refused(
    tmp_path, netns_guest
):
    guest = netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest, rekey=guest.rekey_argv())
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first_key = guest.read_file("/etc/ssh/ssh_host_ed25519_key.pub")

    # A person stops and starts the VM with limactl: the guest comes back with new keys.
    cli.standin.run("stop", "dev-1")
    cli.standin.run("start", "dev-1")
    assert guest.read_file("/etc/ssh/ssh_host_ed25519_key.pub") != first_key
    proc = cli.sand("shell", "dev-1", "--", "id", "-un")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == guest.user
    # The restart emptied nothing here, but apply must reach the guest to know that.
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/src", "NPM_TOKEN") == SECRET
    known_hosts = (tmp_path / "state" / "known_hosts").read_text()
    assert len([line for line in known_hosts.splitlines() if "lima-dev-1." in line]) == 1

    # The same start, a different key: not Lima's doing, so refused.
    subprocess.run(guest.rekey_argv(), check=True, capture_output=True)
    proc = cli.sand("shell", "dev-1", "--", "true")
    assert proc.returncode != 0
    assert "host key differs" in proc.stderr
