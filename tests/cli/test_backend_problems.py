"""A backend that cannot be reached or refuses sand is one problem, however many VMs
it holds: said once, naming the backend and what to do, from the real ``python -m sand``
against fakepve; and a refused connection ends ``plan`` at once instead of after rounds
of retries."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from tests.cli.helpers import Sand

VMS = [{"name": f"b-{i}"} for i in range(20)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wrong_token(tmp_path: Path, token_id: str) -> str:
    path = tmp_path / "wrong-token"
    path.write_text(f"{token_id}=00000000-not-the-secret\n")
    path.chmod(0o600)
    return str(path)


def failed_run(tmp_path: Path, fakepve_server, *command: str, **backend: object) -> str:
    """What ``sand COMMAND`` prints (both streams) for 20 VMs on a backend given
    ``backend``'s fields; it must exit 1."""
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest(VMS, **backend))
    proc = sand.run(*command)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def said_once(text: str, words: str, fix: str) -> None:
    assert text.count(words) == 1, text
    assert fix in text, text
    for vm in VMS:  # every VM still named: none silently left out
        assert re.search(rf"\b{vm['name']}\b", text), vm


def test_a_closed_port_is_one_problem_given_up_at_once(tmp_path, fakepve_server):
    out = failed_run(tmp_path, fakepve_server, "plan", port=closed_port())
    said_once(out, "connection refused by 127.0.0.1", "check the backend's host and port")
    assert "gave up after" not in out  # not retried: nothing listens there
    assert "20 VMs on 'pve' cannot be changed now" in out
    assert len(out.splitlines()) < 12, out


@pytest.mark.parametrize("command", [["plan"], ["apply", "--auto-approve"]])
def test_a_rejected_token_is_said_once_with_its_fix(tmp_path, fakepve_server, command):
    token = wrong_token(tmp_path, fakepve_server.token_id)
    out = failed_run(tmp_path, fakepve_server, *command, token_file=token)
    said_once(out, "401", "check token_file")
    assert len(out.splitlines()) < 12, out
    assert fakepve_server.vms() == []


def test_status_says_an_unknown_backend_once(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest(VMS, port=closed_port()))
    proc = sand.run("status")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    said_once(out, "connection refused by 127.0.0.1", "check the backend's host and port")
    said_once(out, "GET /cluster/resources", "check the backend's host and port")
    rows = [line for line in proc.stdout.splitlines() if line.startswith("b-")]
    assert len(rows) == 20 and all("unknown (backend 'pve', below)" in r for r in rows), out
