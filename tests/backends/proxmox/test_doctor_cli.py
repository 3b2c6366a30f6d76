"""`sand doctor` against a Proxmox API that cannot be reached, or a token that cannot do
its job: one clean line naming the backend, exit 1, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakepve_rig.rig import FakePveRig


def doctor(rig: FakePveRig, tmp_path: Path, **backend: Any) -> subprocess.CompletedProcess[str]:
    return doctor_of(rig.manifest([{"name": "dev"}], **backend), tmp_path)


def doctor_of(data: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``sand doctor`` of the manifest ``data``, written in ``tmp_path``."""
    path = tmp_path / "sand.yaml"
    path.write_text(yaml.safe_dump(data))
    res = subprocess.run(
        [sys.executable, "-m", "sand", "doctor", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "SAND_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"},
        check=False,
    )
    assert "Traceback" not in res.stderr, res.stderr
    return res


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and then never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def test_a_healthy_backend_is_ok(rig: FakePveRig, tmp_path: Path) -> None:
    res = doctor(rig, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["pve: ok"]


def test_api_refusing_connections(rig: FakePveRig, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    res = doctor(rig, tmp_path, port=port)
    assert res.returncode == 1
    (line,) = res.stdout.splitlines()
    assert line.startswith(f"pve: error: the PVE API at https://127.0.0.1:{port} is unreachable")
    assert f"connection refused by 127.0.0.1:{port}: nothing listens there" in line
    assert "check the backend's host and port" in line


def test_api_with_a_certificate_sand_does_not_trust(rig: FakePveRig, tmp_path: Path) -> None:
    rig.clear_log()
    res = doctor(rig, tmp_path, ca_file=None)  # the system CAs do not know fakepve's
    assert res.returncode == 1
    (line,) = res.stdout.splitlines()
    assert line.startswith(
        f"pve: error: the PVE API at https://127.0.0.1:{rig.port} is unreachable"
    )
    assert "TLS verification failed" in line and "set ca_file" in line
    assert rig.log == []  # no request got through


def test_a_ca_file_that_does_not_exist(rig: FakePveRig, tmp_path: Path) -> None:
    res = doctor(rig, tmp_path, ca_file=str(tmp_path / "no-such-ca.pem"))
    assert res.returncode == 1
    (line,) = res.stdout.splitlines()
    assert "is unreachable" in line and "no-such-ca.pem" in line


@pytest.mark.sand_time_scale(0.01)  # the HTTP timeout's 15 s are not waited
def test_api_that_never_answers(rig: FakePveRig, tmp_path: Path, silent_port: int) -> None:
    res = doctor(rig, tmp_path, port=silent_port)
    assert res.returncode == 1
    (line,) = res.stdout.splitlines()
    assert "is unreachable" in line and "Timeout" in line


def test_a_token_missing_a_privilege_apply_needs(rig: FakePveRig, tmp_path: Path) -> None:
    token = rig.add_token("sand@pve!narrow", acl="none")
    rig.run(rig.grant_sand_privileges, "sand@pve!narrow", without=["VM.PowerMgmt"])
    res = doctor(rig, tmp_path, token_file=str(token))
    assert res.returncode == 1
    assert res.stdout.splitlines() == ["pve: error: missing privilege VM.PowerMgmt on /pool/sand"]


def test_doctor_asks_for_vm_snapshot_when_the_manifest_forks(
    rig: FakePveRig, tmp_path: Path
) -> None:
    token = rig.add_token("sand@pve!nosnap", acl="none")
    rig.run(rig.grant_sand_privileges, "sand@pve!nosnap", without=["VM.Snapshot"])
    path = tmp_path / "sand.yaml"
    forks = [{"name": "agent-1"}, {"name": "try-1", "from": {"vm": "agent-1"}}]
    path.write_text(yaml.safe_dump(rig.manifest(forks, token_file=str(token))))
    res = subprocess.run(
        [sys.executable, "-m", "sand", "doctor", str(path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
        env={**os.environ, "SAND_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"},
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines() == [
        "pve: error: missing privilege VM.Snapshot on /pool/sand (a VM of the manifest is a fork)"
    ]


def _proxied(rig: FakePveRig, tmp_path: Path, listen: str) -> subprocess.CompletedProcess[str]:
    """``sand doctor`` for a VM whose deny policy lists a domain, through the backend's
    egress proxy at ``listen`` on this host (the read-only grant egress needs, given)."""
    rig.grant(rig.token_id, "/", "Sys.Audit")
    data = rig.manifest(
        [{"name": "dev", "egress": {"domains": ["allowed.test"], "ports": [443]}}],
        egress_proxy=listen,
    )
    return doctor_of(data, tmp_path)


def test_an_egress_proxy_on_an_address_this_host_lacks_is_named(
    rig: FakePveRig, tmp_path: Path
) -> None:
    res = _proxied(rig, tmp_path, "203.0.113.77:3128")
    assert res.returncode == 1, res.stdout + res.stderr
    # fakepve grants only propagated privileges: the Sys.Audit it needs is reported as
    # too broad on a line of its own, which is not this test's subject.
    (line,) = [line for line in res.stdout.splitlines() if "egress proxy" in line]
    where = "pve: error: egress proxy cannot listen on 203.0.113.77:3128"
    assert line.startswith(f"{where}: Cannot assign requested address")
