"""The broker between a plain HTTP client and HTTPS upstreams: the GitHub API of the
declared repositories, and a declared host.

A real client on this host plays the guest's ``curl``: it reaches the broker with a
VM's broker credential. What is proven is on the far side: what each upstream
received (the real token attached, only what the grant allows), the broker's
operations log and the host's audit trail, and what the client was answered.
"""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sand.audit.log import LOG_FILE
from sand.broker.server import BrokerServer, BrokerState
from sand.desired.brokered import BrokerGrant
from tests.audit.helpers import audit_records
from tests.rig.brokerrig import start_broker
from tests.rig.httpsupstream import HttpsUpstream
from tests.rig.tlscert import self_signed

CREDENTIAL = "vm-credential-0d9c5e7a41b3"
TOKEN = "ghp_httpBrokerCanary-6a0f3e9d"
API_KEY = "key_httpBrokerCanary-4c2b8e71"


@dataclass
class Answer:
    status: int
    body: str
    headers: str


@dataclass
class Rig:
    github: HttpsUpstream  # a GitHub Enterprise API: /api/v3/...
    example: HttpsUpstream  # a plain API host
    broker: BrokerServer
    state: BrokerState
    scratch: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.broker.server_address[1]}"

    def curl(
        self, method: str, path: str, body: str = "", credential: str = CREDENTIAL, extra: str = ""
    ) -> Answer:
        """A real curl, as a guest's agent would run it: the credential as a bearer."""
        head, text = self.scratch / "head", self.scratch / "body"
        argv = ["curl", "-sS", "-X", method, "-D", str(head), "-o", str(text), "-w", "%{http_code}"]
        argv += ["--path-as-is", "-H", "@-"]  # the credential from stdin, never in argv
        if body:
            argv += ["-H", "Content-Type: application/json", "--data-binary", body]
        done = subprocess.run(
            [*argv, f"{self.url}{path}"],
            input=f"Authorization: Bearer {credential}\n{extra}",
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return Answer(int(done.stdout), text.read_text(), head.read_text())

    def operations(self) -> list[dict[str, object]]:
        path = self.state.directory / "operations.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    cert, key = self_signed(tmp_path, "127.0.0.1")
    github = HttpsUpstream("127.0.0.1", cert, key)
    example = HttpsUpstream("127.0.0.1", cert, key)
    webapp = f"https://{github.host}/acme/webapp.git"
    gh = BrokerGrant("GH_TOKEN", (webapp,), ("agent/*",), ("read", "pull-request"))
    api_key = BrokerGrant("EXAMPLE_KEY", (), (), (), (example.host,), "X-Api-Key: {token}")
    broker = start_broker(
        tmp_path / "broker", "dev-1", CREDENTIAL, gh, TOKEN, cert, more=((api_key, API_KEY),)
    )
    try:
        yield Rig(github, example, broker, broker.state, tmp_path)
    finally:
        broker.shutdown()
        broker.server_close()
        github.stop()
        example.stop()


def test_an_allowed_api_read_reaches_github_with_the_real_token(rig: Rig) -> None:
    answer = rig.curl("GET", f"/{rig.github.host}/api/v3/repos/acme/webapp/issues?state=all")
    assert answer.status == 200, answer.body
    assert json.loads(answer.body)["path"] == "/api/v3/repos/acme/webapp/issues?state=all"
    got = rig.github.received[0]
    assert got.headers["authorization"] == f"Bearer {TOKEN}"
    assert CREDENTIAL not in json.dumps(got.headers)
    # The next page is linked at the broker, by the repository's name, and the guest
    # follows it there.
    link = f"{rig.url}/{rig.github.host}/api/v3/repos/acme/webapp/issues?page=2"
    assert f"<{link}>" in answer.headers
    assert answer.headers.lower().count("\nserver:") == 1  # the broker's, not both
    assert rig.curl("GET", link.removeprefix(rig.url)).status == 200
    assert rig.github.received[-1].path == "/api/v3/repos/acme/webapp/issues?page=2"
    op, _next_page = rig.operations()
    assert (op["vm"], op["service"], op["operation"], op["allowed"]) == (
        "dev-1",
        "api",
        "read",
        True,
    )
    assert op["repository"] == f"{rig.github.host}/acme/webapp"


def test_a_pull_request_is_opened_only_from_a_branch_the_grant_may_push(rig: Rig) -> None:
    pulls = f"/{rig.github.host}/api/v3/repos/acme/webapp/pulls"
    opened = rig.curl("POST", pulls, json.dumps({"head": "agent/fix", "base": "main"}))
    assert opened.status == 201, opened.body
    for head, why in (
        ("main", "main is not among the branches the grant may push (agent/*)"),
        ("evil:agent/fix", "a branch of acme's repository, not evil's"),
    ):
        refused = rig.curl("POST", pulls, json.dumps({"head": head, "base": "main"}))
        assert refused.status == 403
        assert why in json.loads(refused.body)["message"]
    (got,) = rig.github.received
    assert json.loads(got.body)["head"] == "agent/fix"
    assert [o["allowed"] for o in rig.operations()] == [True, False, False]


@pytest.mark.parametrize(
    ("method", "path", "said"),
    [
        ("GET", "/api/v3/repos/acme/other/issues", "may not reach"),
        ("POST", "/api/v3/repos/acme/webapp/issues", "may not issue on acme/webapp"),
        ("DELETE", "/api/v3/repos/acme/webapp", "is not an API operation"),
        ("GET", "/api/v3/user", "is not an API operation"),
        ("GET", "/api/v3/repos/acme/webapp/../other", "'..' segments"),
        ("GET", "/api/v3/repos/acme/webapp%2F..%2Fother", "encoded separator"),
        ("GET", "/acme/webapp/raw/main/README.md", "names it"),
    ],
)
def test_what_the_grant_does_not_name_is_refused_before_github_is_asked(
    rig: Rig, method: str, path: str, said: str
) -> None:
    answer = rig.curl(method, f"/{rig.github.host}{path}", "{}" if method == "POST" else "")
    assert answer.status == 403, answer.body
    message = json.loads(answer.body)["message"]
    assert message.startswith("sand broker: ") and said in message
    assert rig.github.received == []
    (op,) = rig.operations()
    assert (op["vm"], op["allowed"], op["reason"]) == ("dev-1", False, message[13:])
    assert op["service"] == ("api" if path.startswith("/api/v3/") else "https")


def test_a_declared_host_gets_the_declared_header_and_no_other_host_is_reached(rig: Rig) -> None:
    forged = "x-api-key: forged\nX-Request-Id: r1\n"  # the guest's own spelling of the header
    answer = rig.curl("POST", f"/{rig.example.host}/v1/things?dry=1", '{"name": "x"}', extra=forged)
    assert answer.status == 201, answer.body
    (got,) = rig.example.received
    assert (got.method, got.path, got.body) == ("POST", "/v1/things?dry=1", b'{"name": "x"}')
    assert got.headers["x-api-key"] == API_KEY and got.headers["x-request-id"] == "r1"
    assert "authorization" not in got.headers  # the guest's credential stays at the broker
    refused = rig.curl("GET", "/127.0.0.1:1/v1/things")
    assert refused.status == 403 and "may not reach 127.0.0.1:1" in refused.body
    assert [(o["service"], o["repository"], o["allowed"]) for o in rig.operations()] == [
        ("https", rig.example.host, True),
        ("https", "127.0.0.1:1", False),
    ]


def test_without_the_vm_credential_nothing_is_forwarded(rig: Rig) -> None:
    answer = rig.curl("GET", f"/{rig.example.host}/v1/things", credential="guessed")
    assert answer.status == 401
    assert "credential is needed" in json.loads(answer.body)["message"]
    assert rig.example.received == [] and rig.github.received == []


def test_an_upstream_whose_certificate_is_not_trusted_is_not_sent_the_token(
    rig: Rig, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    other_cert, _ = self_signed(tmp_path / "other", "127.0.0.1")  # not the upstream's
    rig.broker.tls = ssl.create_default_context(cafile=other_cert)
    answer = rig.curl("GET", f"/{rig.example.host}/v1/things")
    assert answer.status == 502
    assert "certificate" in json.loads(answer.body)["message"]
    assert rig.example.received == []


def test_the_tokens_are_in_no_answer_log_or_audit_record(rig: Rig, tmp_path: Path) -> None:
    answers = [
        rig.curl("GET", f"/{rig.github.host}/api/v3/repos/acme/webapp"),
        rig.curl("POST", f"/{rig.github.host}/api/v3/repos/acme/webapp/issues", "{}"),
        rig.curl("GET", f"/{rig.example.host}/v1/things"),
        rig.curl("GET", f"/{rig.example.host}/v1/../things"),
    ]
    assert [a.status for a in answers] == [200, 403, 200, 403]
    for a in answers:
        assert TOKEN not in a.body + a.headers and API_KEY not in a.body + a.headers
    told = [r for r in audit_records(tmp_path / "state") if r["kind"] == "broker.operation"]
    assert len(told) == 4
    written = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    written += [p for p in rig.state.directory.rglob("*") if p.is_file()]
    assert any(p.name == LOG_FILE for p in written)
    for path in written:
        data = path.read_bytes()
        assert TOKEN.encode() not in data and API_KEY.encode() not in data, path
