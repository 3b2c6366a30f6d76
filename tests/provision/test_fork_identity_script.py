"""The guest's fork-identity step, run for real as root in a mount and UTS namespace
of its own (tmpfs over /etc/ssh and /var/lib, files bound over /etc/machine-id and
/etc/hostname), so this machine's identity is never touched (issue 29, item 2):
two forks of one source get different machine-ids and SSH host keys, the fork's
name as hostname, and a second run changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sand.desired.fork import DesiredFork
from sand.provision.bundle import Bundle
from sand.provision.checks import ProvisionSpecError
from sand.provision.steps import fork_identity_step
from tests.provision.helpers import make_vm
from tests.required import require

SCRIPT = Bundle().root / "fork-identity.sh"
SOURCE_ID = "0123456789abcdef0123456789abcdef"

# Inside the namespace: the guest's files are the test's, then the step runs.
SANDBOX = """
set -e
mount -t tmpfs tmpfs /etc/ssh
mount -t tmpfs tmpfs /var/lib
cp -a "$GUEST/ssh/." /etc/ssh/
mkdir -p /var/lib/sand
[ ! -f "$GUEST/mark" ] || cp "$GUEST/mark" /var/lib/sand/fork-identity
mount --bind "$GUEST/machine-id" /etc/machine-id
mount --bind "$GUEST/hostname" /etc/hostname
hostname "$(cat "$GUEST/hostname")"
set +e
/bin/bash "$SCRIPT" "$NAME"
rc=$?
cp -a /etc/ssh/. "$GUEST/ssh/"
[ ! -f /var/lib/sand/fork-identity ] || cp /var/lib/sand/fork-identity "$GUEST/mark"
hostname >"$GUEST/kernel-hostname"
exit $rc
"""


@pytest.fixture(autouse=True)
def _root_and_namespaces() -> None:
    require(os.geteuid() == 0, "needs root (mount and UTS namespaces)")
    require(shutil.which("unshare") is not None and shutil.which("ssh-keygen") is not None,
            "needs unshare and ssh-keygen")  # fmt: skip


def source_copy(root: Path) -> Path:
    """The files a fork boots with: its source's, copied."""
    guest = root
    (guest / "ssh").mkdir(parents=True)
    key = str(guest / "ssh" / "ssh_host_ed25519_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    (guest / "machine-id").write_text(SOURCE_ID + "\n")
    (guest / "hostname").write_text("agent-1\n")
    return guest


def run_step(guest: Path, name: str) -> subprocess.CompletedProcess[str]:
    vm = replace(make_vm(), name=name, fork=DesiredFork("agent-1"))
    step = fork_identity_step(vm)
    env = {**os.environ, "GUEST": str(guest), "SCRIPT": str(SCRIPT), "NAME": step.argv[-1]}
    return subprocess.run(
        ["unshare", "--mount", "--uts", "--propagation", "private", "bash", "-c", SANDBOX],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def host_key(guest: Path) -> str:
    return (guest / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()[1]


def test_two_forks_of_one_source_are_machines_of_their_own(tmp_path: Path) -> None:
    source = source_copy(tmp_path / "source")
    forks = {}
    for name in ("try-1", "try-2"):
        guest = tmp_path / name
        shutil.copytree(source, guest)
        proc = run_step(guest, name)
        assert proc.returncode == 0, proc.stderr
        assert "sand:changed /etc/machine-id made anew" in proc.stdout
        forks[name] = guest
    ids = {name: (g / "machine-id").read_text().strip() for name, g in forks.items()}
    keys = {name: host_key(g) for name, g in forks.items()}
    assert len({SOURCE_ID, *ids.values()}) == 3
    assert all(len(i) == 32 for i in ids.values())
    assert len({host_key(source), *keys.values()}) == 3
    for name, guest in forks.items():
        assert (guest / "hostname").read_text() == f"{name}\n"
        assert (guest / "kernel-hostname").read_text().strip() == name
    assert (source / "machine-id").read_text().strip() == SOURCE_ID  # the source untouched


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    guest = source_copy(tmp_path / "g")
    assert run_step(guest, "try-1").returncode == 0
    made = ((guest / "machine-id").read_text(), host_key(guest))
    proc = run_step(guest, "try-1")
    assert proc.returncode == 0, proc.stderr
    assert "sand:changed" not in proc.stdout
    assert ((guest / "machine-id").read_text(), host_key(guest)) == made


def test_a_name_no_hostname_can_take_is_refused_on_the_host() -> None:
    with pytest.raises(ProvisionSpecError):
        fork_identity_step(replace(make_vm(), name="bad name;", fork=DesiredFork("a")))
