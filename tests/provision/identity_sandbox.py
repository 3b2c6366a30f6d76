"""A guest's identity step (fork-identity, pool-identity) run for real as root in a
mount and UTS namespace of its own: tmpfs over /etc/ssh and /var/lib, files bound over
/etc/machine-id and /etc/hostname, so this machine's identity is never touched. The
guest is a directory: ``ssh/`` (its host keys), ``sand/`` (its /var/lib/sand),
``machine-id`` and ``hostname``; the step's results are copied back into it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sand.provision.steps import Step
from tests.required import require

# Inside the namespace: the guest's files are the test's, then the step runs.
SANDBOX = """
set -e
mount -t tmpfs tmpfs /etc/ssh
mount -t tmpfs tmpfs /var/lib
cp -a "$GUEST/ssh/." /etc/ssh/
mkdir -p /var/lib/sand "$GUEST/sand"
cp -a "$GUEST/sand/." /var/lib/sand/
mount --bind "$GUEST/machine-id" /etc/machine-id
mount --bind "$GUEST/hostname" /etc/hostname
hostname "$(cat "$GUEST/hostname")"
set +e
/bin/bash "$SCRIPT" "$NAME"
rc=$?
rm -rf "$GUEST/ssh" "$GUEST/sand"
cp -a /etc/ssh "$GUEST/ssh"
cp -a /var/lib/sand "$GUEST/sand"
hostname >"$GUEST/kernel-hostname"
exit $rc
"""


def require_namespaces() -> None:
    require(os.geteuid() == 0, "needs root (mount and UTS namespaces)")
    require(shutil.which("unshare") is not None and shutil.which("ssh-keygen") is not None,
            "needs unshare and ssh-keygen")  # fmt: skip


def new_key(path: Path) -> str:
    """A new ed25519 key pair at ``path``; its public key field."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().split()[1]


def make_guest(root: Path, machine_id: str, hostname: str) -> Path:
    """A guest with an ed25519 host key of its own, ``machine_id`` and ``hostname``."""
    new_key(root / "ssh" / "ssh_host_ed25519_key")
    (root / "sand").mkdir()
    (root / "machine-id").write_text(machine_id + "\n")
    (root / "hostname").write_text(hostname + "\n")
    return root


def run_step(guest: Path, step: Step, script: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUEST": str(guest), "SCRIPT": str(script), "NAME": step.argv[-1]}
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
