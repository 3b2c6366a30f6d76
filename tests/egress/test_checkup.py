"""``sand doctor``'s look at the egress proxy on this host: a real listener process on a
real port, an address this host does not have, a port another program holds, and a
listener killed as a restart of this host would leave it."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.egress import registry
from sand.egress.checkup import proxy_findings
from tests.egress.test_listener import free_port

PROJECT, BACKEND, VM = "demo", "pve", "agent-1"
NOT_OURS = "203.0.113.77"  # TEST-NET-3: an address no host of the rig has


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path / "state"
    registry.stop(registry.proxy_dir(PROJECT, BACKEND))


def port_closes(port: int, patience: float = 10.0) -> bool:
    """Whether 127.0.0.1:``port`` stops taking connections within ``patience`` seconds
    (a killed process's sockets close as the kernel tears it down)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.05)  # polling the kernel's socket table
    return False


def test_a_proxy_not_started_yet_is_fine_when_it_could_listen() -> None:
    listen = f"127.0.0.1:{free_port()}"
    [(level, text)] = proxy_findings(PROJECT, BACKEND, listen)
    assert level == "ok" and f"can listen on {listen}" in text


def test_an_address_this_host_does_not_have_is_an_error() -> None:
    listen = f"{NOT_OURS}:8888"
    [(level, text)] = proxy_findings(PROJECT, BACKEND, listen)
    assert level == "error"
    assert f"cannot listen on {listen}: Cannot assign requested address" in text


def test_a_port_another_program_holds_is_an_error() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        listen = f"127.0.0.1:{other.getsockname()[1]}"
        [(level, text)] = proxy_findings(PROJECT, BACKEND, listen)
    assert level == "error" and "Address already in use" in text


def test_a_running_proxy_says_where_and_for_how_many() -> None:
    listen = f"127.0.0.1:{free_port()}"
    registry.register(PROJECT, BACKEND, VM, "127.0.0.1", listen)
    pid, _ = registry.listener_of(PROJECT, BACKEND) or (0, "")
    [(level, text)] = proxy_findings(PROJECT, BACKEND, listen)
    assert level == "ok"
    assert text == f"egress proxy listening on {listen} (pid {pid}), 1 VM(s) registered behind it"


def test_a_proxy_the_manifest_moved_is_a_warning() -> None:
    listen, moved = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    registry.register(PROJECT, BACKEND, VM, "127.0.0.1", listen)
    [(level, text)] = proxy_findings(PROJECT, BACKEND, moved)
    assert level == "warning" and f"listens on {listen}" in text and f"declares {moved}" in text


def test_a_killed_proxy_with_vms_behind_it_is_an_error() -> None:
    listen = f"127.0.0.1:{free_port()}"
    registry.register(PROJECT, BACKEND, VM, "127.0.0.1", listen)
    running = registry.listener_of(PROJECT, BACKEND)
    assert running is not None
    # As a restart of this host leaves it: no process, its run.json still there.
    os.kill(running[0], signal.SIGKILL)
    assert port_closes(int(listen.rpartition(":")[2]))
    assert (registry.proxy_dir(PROJECT, BACKEND) / "run.json").exists()
    [(level, text)] = proxy_findings(PROJECT, BACKEND, listen)
    assert level == "error"
    assert "not running, with 1 VM(s) registered behind it" in text
