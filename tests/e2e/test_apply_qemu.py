"""`sand apply`, the command a person runs, all the way to a full VM (qemu TCG, its own
kernel, systemd as PID 1): the limactl stand-in's instance is backed by the session's
qemu guest, so sand's whole path runs for real — observe, create, start, the endpoint
Lima publishes, host-key pinning, provisioning over SSH, secrets into tmpfs, the marker
— and a second apply finds nothing to do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import as_user, home_snapshot, root, scoped_env, stand_in_agents

if TYPE_CHECKING:
    from tests.rig.qemu import QemuGuest

pytestmark = [pytest.mark.e2e, pytest.mark.tcg]

# The session's VM is shared: provision a user of this test's own (test_provision_qemu
# uses another), never reshape the login user.
USER = "sandapply"
CANARY = "qemu-apply-canary-5c1e-never-on-disk"
MANIFEST = f"""\
apiVersion: sand/v1
project: qemuapply
backends:
  laptop: {{type: lima, lima_home: ./lima}}
defaults: {{image: debian-12, disk: 20GiB, memory: 2GiB}}
secrets:
  API_TOKEN:
    from: {{env: SAND_TEST_QEMU_TOKEN}}
vms:
  - name: dev-q
    user: {USER}
    agents: [claude, codex]
    secrets: [{{name: API_TOKEN, scope: ~/work}}]
"""


def sand(root_dir: Path, standin: StandIn, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(root_dir / "state"),
        "SAND_TEST_QEMU_TOKEN": CANARY,
        "SAND_AGENT_SOURCE": str(stand_in_agents(root_dir / "agents")),
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")  # the manifest names it
    return subprocess.run(
        [sys.executable, "-m", "sand", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root_dir,
        check=False,
    )


def test_sand_apply_provisions_a_qemu_vm_and_a_second_apply_is_a_no_op(
    qemu_guest: QemuGuest, tmp_path: Path
) -> None:
    guest = qemu_guest
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.configure(require_tty_false=True, host_user=guest.user)
    standin.back_with_guest("dev-q", guest)
    (tmp_path / "sand.yaml").write_text(MANIFEST)

    started = time.monotonic()
    proc = sand(tmp_path, standin, "apply", "--auto-approve")
    first = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    assert standin.instances()[-1:] == ["dev-q"]

    # The provisioned user: made by sand, with passwordless sudo and the agents' settings.
    uid = root(guest, "id", "-u", USER).strip()
    assert as_user(guest, "sudo -n true", user=USER).returncode == 0
    assert "stand-in claude" in as_user(guest, "bash -lc 'claude --version'", USER).stdout.decode()
    assert 'approval_policy = "never"' in root(guest, "cat", f"/home/{USER}/.codex/config.toml")
    # The secret: in a 0600 file on tmpfs, seen only under its scope.
    assert scoped_env(guest, "~/work", "API_TOKEN", user=USER) == CANARY
    assert scoped_env(guest, "~", "API_TOKEN", user=USER) is None
    candidates = [f"/run/user/{uid}/sand/env", f"/dev/shm/sand-{uid}/env"]
    (env_dir,) = [d for d in candidates if guest.run_root(["test", "-d", d]).returncode == 0]
    assert root(guest, "stat", "-f", "-c", "%T", env_dir).strip() == "tmpfs"
    files = root(guest, "find", env_dir, "-type", "f", "-printf", "%m %u\n").split("\n")
    assert [f for f in files if f] == [f"600 {USER}"]
    on_disk = guest.run_root(["grep", "-rlF", "--", CANARY, "/home", "/etc", "/var", "/root"])
    assert on_disk.returncode == 1, on_disk.stdout
    # The marker on the host records the convergence, never the value.
    marker = (standin.instance_dir("dev-q") / "sand-marker.json").read_text()
    assert '"secrets": "1-' in marker and CANARY not in marker

    # Converged: a second apply changes nothing, on the host or in the guest.
    watched = (f"/home/{USER}", env_dir, "/usr/local/lib/sand")
    before = home_snapshot(guest, *watched)
    standin.clear_log()
    started = time.monotonic()
    again = sand(tmp_path, standin, "apply", "--auto-approve")
    second = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout, again.stdout
    assert home_snapshot(guest, *watched) == before
    assert {c for c in standin.commands() if c} == {"list"}  # nothing made, started or edited
    assert sand(tmp_path, standin, "plan", "--detailed-exitcode").returncode == 0
    print(f"\nsand apply to a qemu TCG VM: first {first:.1f}s, second (no-op) {second:.1f}s")
