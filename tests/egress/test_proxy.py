"""The egress proxy as QEMU runs it: one process per guest connection, its stdin and
stdout one end of a socket pair (libslirp's ``fork_exec``), deciding by the VM's policy
file. Destinations are real TCP listeners on this host; each denial is read back from
the VM's denial log and the host's audit trail."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.audit.entries import entries
from sand.audit.log import LOG_FILE
from sand.egress.policy import PolicyFile, decide, name_allowed
from tests.egress.helpers import on_a_connection
from tests.rig.acceptloop import AcceptLoop


class Listener:
    """A TCP server on 127.0.0.1 that answers each connection with what it received
    first, prefixed: a destination the proxy connects to or not."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.accepting = AcceptLoop(self.sock, self._echo, "echo-listener")

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            data = conn.recv(65536)
            self.received.append(data)
            conn.sendall(b"echo:" + data)

    def close(self) -> None:
        self.accepting.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    made = Listener()
    yield made
    made.close()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def write_policy(tmp_path: Path, **lists: object) -> Path:
    policy = PolicyFile(
        project="p",
        backend="laptop",
        vm="agent-1",
        summary="deny ...",
        domains=tuple(lists.get("domains", ())),  # type: ignore[arg-type]
        cidrs=tuple(lists.get("cidrs", ("127.0.0.1/32",))),  # type: ignore[arg-type]
        ports=tuple(lists["ports"]),  # type: ignore[arg-type]
        denials=str(tmp_path / "denied.jsonl"),
    )
    path = tmp_path / "sand-egress.json"
    path.write_bytes(policy.to_bytes())
    return path


def through_proxy(policy: Path, request: bytes, then: bytes = b"") -> bytes:
    status, answer = on_a_connection("sand.egress.proxy", policy, request, then)
    assert status == 0
    return answer


def denials(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "denied.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_connect_to_an_allowed_address_and_port_is_tunnelled(tmp_path, state, listener):
    policy = write_policy(tmp_path, ports=[listener.port])
    answer = through_proxy(
        policy, f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode(), then=b"hello"
    )
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\necho:hello"
    assert listener.received == [b"hello"]
    assert denials(tmp_path) == []


def test_an_address_outside_the_cidrs_is_denied_logged_and_audited(tmp_path, state, listener):
    policy = write_policy(tmp_path, cidrs=["10.20.0.0/16"], ports=[listener.port])
    answer = through_proxy(policy, f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert listener.received == []  # never connected
    (entry,) = denials(tmp_path)
    assert (entry["vm"], entry["destination"]) == ("agent-1", f"127.0.0.1:{listener.port}")
    assert isinstance(entry["time"], float) and "no allowed network" in str(entry["reason"])
    (audited,) = [r for r in entries(state / "audit" / LOG_FILE) if r["kind"] == "egress.denied"]
    assert (audited["vm"], audited["destination"]) == ("agent-1", f"127.0.0.1:{listener.port}")


def test_a_port_not_listed_is_denied(tmp_path, state, listener):
    policy = write_policy(tmp_path, ports=[443])
    answer = through_proxy(policy, f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert listener.received == []
    assert "port" in str(denials(tmp_path)[0]["reason"])


def test_a_name_not_listed_is_denied_even_where_its_address_is_allowed(tmp_path, state, listener):
    policy = write_policy(tmp_path, cidrs=["127.0.0.0/8"], ports=[listener.port])
    answer = through_proxy(policy, f"CONNECT localhost:{listener.port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert listener.received == []
    assert denials(tmp_path)[0]["destination"] == f"localhost:{listener.port}"


def test_a_listed_name_is_resolved_on_the_host_and_reached(tmp_path, state, listener):
    policy = write_policy(
        tmp_path, domains=["localhost"], cidrs=["127.0.0.0/8", "::1/128"], ports=[listener.port]
    )
    answer = through_proxy(
        policy, f"CONNECT localhost:{listener.port} HTTP/1.1\r\n\r\n".encode(), then=b"hi"
    )
    assert answer.endswith(b"echo:hi")


def test_plain_http_in_absolute_form_is_sent_in_origin_form(tmp_path, state, listener):
    policy = write_policy(tmp_path, ports=[listener.port])
    request = (
        f"GET http://127.0.0.1:{listener.port}/a/b?c=1 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{listener.port}\r\nProxy-Authorization: x\r\n\r\n"
    ).encode()
    answer = through_proxy(policy, request)
    (sent,) = listener.received
    assert sent == f"GET /a/b?c=1 HTTP/1.1\r\nHost: 127.0.0.1:{listener.port}\r\n\r\n".encode()
    assert answer == b"echo:" + sent


def test_a_request_that_is_not_a_proxy_request_is_refused(tmp_path, state, listener):
    policy = write_policy(tmp_path, ports=[listener.port])
    answer = through_proxy(policy, b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert listener.received == []


def test_an_unreadable_policy_denies_everything(tmp_path, state, listener):
    (tmp_path / "broken.json").write_text("{")
    answer = through_proxy(
        tmp_path / "broken.json", f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert listener.received == []


def policy_of(**lists: object) -> PolicyFile:
    return PolicyFile("p", "b", "v", "s", denials="", **lists)  # type: ignore[arg-type]


def test_wildcards_match_names_under_the_domain_only():
    assert name_allowed("api.github.com", ["*.github.com"])
    assert name_allowed("API.GitHub.com.", ["*.github.com"])
    assert not name_allowed("github.com", ["*.github.com"])
    assert not name_allowed("evilgithub.com", ["*.github.com"])
    assert not name_allowed("github.com.evil.org", ["github.com"])


def test_an_allowed_name_that_resolves_to_the_hosts_own_addresses_reaches_nothing():
    policy = policy_of(domains=("x.example.org",), cidrs=(), ports=(443,))
    for address in ("127.0.0.1", "169.254.169.254", "::1", "0.0.0.0"):
        verdict = decide(policy, "x.example.org", 443, lambda name, port, a=address: [a])
        assert not verdict.allowed, address
    public = decide(policy, "x.example.org", 443, lambda name, port: ["192.0.2.7", "::1"])
    assert (public.allowed, public.addresses) == (True, ("192.0.2.7",))


def test_a_name_not_allowed_is_never_looked_up():
    looked: list[str] = []
    policy = policy_of(domains=("github.com",), cidrs=("0.0.0.0/1",), ports=(443,))

    def resolve(name: str, port: int) -> list[str]:
        looked.append(name)
        return ["1.2.3.4"]

    assert not decide(policy, "secret.attacker.example", 443, resolve).allowed
    assert looked == []


def test_ip_literals_are_matched_against_the_cidrs_by_family():
    policy = policy_of(domains=(), cidrs=("10.20.0.0/16", "2001:db8::/32"), ports=(443,))
    assert decide(policy, "10.20.3.4", 443).allowed
    assert decide(policy, "[2001:db8::1]", 443).allowed
    assert not decide(policy, "10.21.0.1", 443).allowed
    assert not decide(policy, "::ffff:10.20.3.4", 443).allowed
