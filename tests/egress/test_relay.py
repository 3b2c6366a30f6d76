"""The broker's forward for a restricted Lima guest: the grant tells such a guest the
forward's address (it cannot reach the host's loopback), and the relay QEMU runs for
each connection to it reaches the project's real broker, wherever it listens now."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.broker import client
from sand.broker.client import LIMA_HOST
from sand.desired.brokered import BrokerGrant
from sand.egress.policy import PolicyFile
from tests.egress.helpers import on_a_connection

GRANT = (BrokerGrant("GH_TOKEN", ("https://git.example/acme/widget.git",), ("agent/*",)),)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    yield "p"
    for vm in ("open", "closed"):
        client.revoke("p", vm)  # the last one stops the broker


def test_a_restricted_lima_guest_is_told_its_own_forward_an_open_one_the_gateway(project):
    closed = client.grant(project, "closed", "127.0.0.1", GRANT, {"GH_TOKEN": "t"}, restricted=True)
    opened = client.grant(project, "open", "127.0.0.1", GRANT, {"GH_TOKEN": "t"})
    assert closed.url == "http://192.168.5.5:80"
    assert opened.url.startswith(f"http://{LIMA_HOST}:")


def policy_file(tmp_path: Path, project: str) -> Path:
    path = tmp_path / "sand-egress.json"
    path.write_bytes(
        PolicyFile(project, "laptop", "closed", "s", (), (), (443,), str(tmp_path / "d")).to_bytes()
    )
    return path


def test_the_relay_reaches_the_projects_broker(project, tmp_path):
    client.grant(project, "closed", "127.0.0.1", GRANT, {"GH_TOKEN": "t"}, restricted=True)
    request = (
        b"GET /acme/widget.git/info/refs?service=git-upload-pack HTTP/1.1\r\n"
        b"Host: 192.168.5.5\r\nConnection: close\r\n\r\n"
    )
    status, answer = on_a_connection("sand.egress.relay", policy_file(tmp_path, project), request)
    assert status == 0
    # The broker itself answered: no credential, so it asks for one.
    assert answer.startswith(b"HTTP/1.") and b" 401 " in answer.split(b"\r\n")[0], answer[:200]


def test_without_a_broker_the_relay_closes_the_connection(project, tmp_path):
    status, answer = on_a_connection("sand.egress.relay", policy_file(tmp_path, project), b"")
    assert (status, answer) == (1, b"")
