"""Proxmox guests' egress proxy: the long-lived listener apply starts, a real process
on a real TCP port, vouching for a VM by its credential and its address together.
Destinations are real TCP listeners on this host; each denial is read back from the
VM's denial log, the host's audit trail or the listener's own record of refusals."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.audit.entries import entries
from sand.audit.log import LOG_FILE
from sand.egress import registry
from sand.manifest.egress import EgressPolicy
from tests.egress.test_proxy import Listener

PROJECT, BACKEND, VM = "demo", "pve", "agent-1"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def upstream() -> Iterator[Listener]:
    made = Listener()
    yield made
    made.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def proxy(state: Path, upstream: Listener) -> Iterator[str]:
    """VM agent-1 allowed ``localhost`` (and 127.0.0.0/8, which a name may lead to only
    when listed) on the upstream's port, registered from 127.0.0.1: its proxy URL."""
    policy = EgressPolicy(
        "deny", domains=("localhost",), cidrs=("127.0.0.0/8",), ports=(upstream.port,)
    )
    registry.write_policy(PROJECT, BACKEND, VM, "deny except 1 domain", policy)
    url = registry.register(PROJECT, BACKEND, VM, "127.0.0.1", f"127.0.0.1:{free_port()}")
    yield url
    registry.forget(PROJECT, BACKEND, VM)


def ask(url: str, request: str, *, source: str = "127.0.0.1", auth: str | None = None) -> bytes:
    """Send ``request`` (its head; the VM's ``Proxy-Authorization`` added from ``url``
    unless ``auth`` says another) from ``source``; all the proxy answered."""
    userinfo, _, listen = url.removeprefix("http://").rpartition("@")
    address, _, port = listen.rpartition(":")
    if auth is None:
        auth = base64.b64encode(userinfo.encode()).decode()
    head = f"{request}\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
    with socket.socket() as conn:
        conn.bind((source, 0))
        conn.connect((address, int(port)))
        conn.sendall(head.encode())
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_an_allowed_name_is_reached_through_connect(proxy: str, upstream: Listener):
    answer = ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1")
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n")


def test_plain_http_is_sent_on_without_the_vms_credential(proxy: str, upstream: Listener):
    answer = ask(proxy, f"GET http://localhost:{upstream.port}/x HTTP/1.1\r\nHost: localhost")
    assert b"echo:GET /x HTTP/1.1\r\n" in answer
    (received,) = upstream.received
    assert b"Proxy-Authorization" not in received
    assert proxy.rpartition("@")[0].rpartition(":")[2].encode() not in received


def test_a_disallowed_name_is_refused_and_logged_with_vm_destination_and_time(
    proxy: str, upstream: Listener, state: Path
):
    answer = ask(proxy, f"CONNECT exfil.example:{upstream.port} HTTP/1.1")
    assert answer.startswith(b"HTTP/1.1 403 Forbidden")
    assert upstream.received == []
    log = registry.denial_log(PROJECT, BACKEND, VM)
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert (entry["vm"], entry["backend"], entry["destination"]) == (
        VM, BACKEND, f"exfil.example:{upstream.port}",
    )  # fmt: skip
    assert entry["time"] > 0
    (record,) = [e for e in entries(state / "audit" / LOG_FILE) if e.get("kind") == "egress.denied"]
    assert record["vm"] == VM


def test_the_credential_from_another_address_is_refused(proxy: str, upstream: Listener):
    # A fork holds its source's credential on its disk, not its source's address.
    answer = ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1", source="127.0.0.2")
    assert answer.startswith(b"HTTP/1.1 407 ")
    assert upstream.received == []
    refused = (registry.proxy_dir(PROJECT, BACKEND) / "refused.jsonl").read_text()
    assert json.loads(refused.splitlines()[0])["source"] == "127.0.0.2"


def test_the_address_without_the_credential_is_refused(proxy: str, upstream: Listener):
    # A VM that took another's address does not hold its credential.
    forged = base64.b64encode(f"{VM}:guessed".encode()).decode()
    for auth in (forged, ""):
        answer = ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1", auth=auth)
        assert answer.startswith(b"HTTP/1.1 407 ")
    assert upstream.received == []


def test_the_last_vm_forgotten_stops_the_listener(proxy: str):
    directory = registry.proxy_dir(PROJECT, BACKEND)
    address, _, port = proxy.rpartition("@")[2].rpartition(":")
    registry.forget(PROJECT, BACKEND, VM)
    assert not (directory / "run.json").exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, int(port)), timeout=5).close()
