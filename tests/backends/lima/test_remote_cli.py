"""`sand apply` / `sand plan` as a person runs them against a remote Lima host:
a real sshd on 127.0.0.1 whose PATH has the limactl stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.backends.lima.sshd_rig import Sshd, sshd  # noqa: F401 - fixture


def write_manifest(s: Sshd, path: Path, vms: list[dict[str, object]]) -> None:
    data = {
        "apiVersion": "sand/v1",
        "project": "remotecli",
        "backends": {
            "buildbox": {
                "type": "lima",
                "ssh": {
                    "host": "127.0.0.1",
                    "port": s.port,
                    "user": "root",
                    "identity": str(s.client_key),
                    "known_hosts": str(s.known_hosts),
                    "lima_home": str(s.standin.lima_home),
                },
            }
        },
        "defaults": {"image": "debian-12", "provision": False, "disk": "20GiB", "memory": "2GiB"},
        "vms": vms,
    }
    path.write_text(yaml.safe_dump(data))


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sand", *args, str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=path.parent,
        env=dict(os.environ),
        check=False,
    )


def vm_names(s: Sshd) -> list[str]:
    return sorted(n for n in s.standin.instances() if not n.startswith("sand-base"))


def test_remote_apply_then_noop_over_one_connection(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    manifest = tmp_path / "sand.yaml"
    write_manifest(sshd, manifest, [{"name": "r-1"}, {"name": "r-2", "cpus": 4}])
    res = run(manifest, "apply", "--auto-approve")
    assert res.returncode == 0, res.stdout + res.stderr
    assert vm_names(sshd) == ["r-1", "r-2"]
    before = sshd.connections()
    sshd.standin.clear_log()
    res = run(manifest, "plan", "--detailed-exitcode")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No changes." in res.stdout
    assert sshd.connections() == before + 1  # one SSH connection for the whole plan
    assert [c for c in sshd.standin.commands() if c] == ["list"]


def test_remote_host_key_change_refuses_and_changes_nothing(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    manifest = tmp_path / "sand.yaml"
    write_manifest(sshd, manifest, [{"name": "r-1"}])
    other = Path(f"{sshd.other_key}.pub").read_text().split()
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    res = run(manifest, "apply", "--auto-approve")
    assert res.returncode == 1
    assert str(sshd.known_hosts) in res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert vm_names(sshd) == []


def test_remote_lima_refuses_a_deny_policy_and_creates_nothing(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The VM's QEMU would run on the remote host, where sand's egress proxy does not."""
    manifest = tmp_path / "sand.yaml"
    write_manifest(sshd, manifest, [{"name": "r-1", "egress": {"cidrs": ["10.0.0.0/8"]}}])
    res = run(manifest, "apply", "--auto-approve")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "cannot be enforced on backend 'buildbox': the VM's QEMU runs on the remote" in (
        res.stdout
    ), res.stdout
    assert vm_names(sshd) == []
