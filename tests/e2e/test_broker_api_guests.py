"""The GitHub API and a declared host through the broker, from a real guest's curl and gh.

``sand apply`` on the limactl stand-in, a netns guest behind the instance; the
upstreams are HTTPS servers on the rig's bridge that record what they receive
(one a GitHub Enterprise API, ``/api/v3/...``, one a plain API host). The guest's
curl reaches them only at the broker's URL with its VM's broker credential: an
allowed API read and a declared host's call arrive with the real token attached;
an operation the grant does not name is refused in words and never arrives; and
the token's bytes are in no guest file or process. The guest's curl stands for any
HTTP client; the guest's own ``gh`` (Debian's, from the workbench) is driven the way
docs/credentials.md tells an agent: ``gh api`` with the broker's full URL and the
VM's broker credential as ``GH_ENTERPRISE_TOKEN``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_broker_guests import Rig, _guest_holding, _host_holding
from tests.provision.e2e_helpers import as_user
from tests.rig.gitserver import GitServer
from tests.rig.httpsupstream import HttpsUpstream
from tests.rig.tlscert import self_signed

pytestmark = pytest.mark.e2e

# As docs/credentials.md tells an agent: the broker's URL and the credential's file from
# the guest's broker.gitconfig; the credential goes to curl on stdin, never in an argv.
CURL = (
    "b=$(sed -n 's/^\\[credential \"\\(.*\\)\"\\]$/\\1/p' ~/.config/sand/git/broker.gitconfig); "
    "f=$(sed -n 's/^\\thelper = [^ ]* //p' ~/.config/sand/git/broker.gitconfig); "
    'printf \'Authorization: Bearer %s\\n\' "$(cat "$f")" | '
    "curl -sS -H @- -H 'Content-Type: application/json' -o ~/answer -w '%{{http_code}}' "
    '{args} "$b/{path}"'
)


@pytest.fixture
def rig(
    tmp_path: Path, netns_guest, monkeypatch
) -> Iterator[tuple[Rig, object, HttpsUpstream, HttpsUpstream]]:
    from tests.rig.guest import ensure_bridge

    bridge = ensure_bridge()
    cert, key = self_signed(tmp_path, bridge)
    server = GitServer(f"rig-brokered-{os.urandom(12).hex()}", tls=(cert, key)).start()
    server.create_repo("project", {"README.md": "through the broker\n"})
    github, example = HttpsUpstream(bridge, cert, key), HttpsUpstream(bridge, cert, key)
    monkeypatch.setenv("SAND_TEST_GH", server.token)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    guest = netns_guest()
    cli = Rig(tmp_path, server)
    cli.cli.standin.back_with_guest("dev-1", guest)
    project = server.url_for("project")
    secrets = {
        "GH_TOKEN": {
            "from": {"env": "SAND_TEST_GH"},
            "deliver": "broker",
            "broker": {
                "repositories": [project, f"https://{github.host}/acme/webapp.git"],
                "push": ["agent/*"],
                "api": ["read"],
                "hosts": [example.host],
                "header": "X-Api-Key: {token}",
            },
        },
    }
    manifest = {
        "apiVersion": "sand/v1",
        "project": "brokere2e",
        "backends": {"laptop": {"type": "lima", "lima_home": "./lima", "derive_bases": False}},
        "secrets": secrets,
        "repos": {"project": {"url": project, "token": "GH_TOKEN"}},
        "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB"},
        "vms": [{"name": "dev-1", "repos": ["project"]}],
    }
    cli.cli.manifest.write_text(json.dumps(manifest))
    try:
        yield cli, guest, github, example
    finally:
        cli.sand("destroy", "--auto-approve")
        server.stop()
        github.stop()
        example.stop()


def _curl(guest, path: str, args: str = "") -> tuple[int, str]:
    done = as_user(guest, CURL.format(args=args, path=path))
    assert done.returncode == 0, done.stderr
    answer = as_user(guest, "cat ~/answer").stdout.decode()
    return int(done.stdout), answer


def test_a_guests_curl_reaches_the_api_and_a_declared_host_only_as_granted(rig) -> None:
    cli, guest, github, example = rig
    plan = cli.sand("plan")
    assert f"api read; https {example.host} (X-Api-Key)" in plan.stdout, plan.stdout
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    status, answer = _curl(guest, f"{github.host}/api/v3/repos/acme/webapp/pulls")
    assert status == 200, answer
    (got,) = github.received
    assert (got.path, got.headers["authorization"]) == (
        "/api/v3/repos/acme/webapp/pulls",
        f"Bearer {cli.server.token}",
    )

    body = shlex.quote(json.dumps({"head": "agent/x", "base": "main"}))
    status, answer = _curl(guest, f"{github.host}/api/v3/repos/acme/webapp/pulls", f"-d {body}")
    assert status == 403
    assert "sand broker: dev-1 may not pull-request on acme/webapp" in answer
    assert len(github.received) == 1  # the refused one never arrived

    status, answer = _curl(guest, f"{example.host}/v1/ping")
    assert status == 200, answer
    (called,) = example.received
    assert called.headers["x-api-key"] == cli.server.token
    assert "authorization" not in called.headers

    log = cli.root / "state" / "projects" / "brokere2e" / "broker" / "operations.jsonl"
    ops = [json.loads(line) for line in log.read_text().splitlines()]
    ops = [o for o in ops if not str(o["service"]).startswith("git-")]  # the clone's
    assert [(o["service"], o.get("operation"), o["allowed"]) for o in ops] == [
        ("api", "read", True),
        ("api", "pull-request", False),
        ("https", None, True),
    ]
    token = cli.server.token
    assert _guest_holding(guest, token) == []
    assert token not in cli.output and _host_holding(cli.root, token) == []


# As docs/credentials.md tells an agent for gh: `gh api` with the broker's full URL, the
# VM's broker credential as GH_ENTERPRISE_TOKEN (gh sends it as `Authorization: token
# ...` to a host that is not github.com), never in an argv.
GH = (
    "b=$(sed -n 's/^\\[credential \"\\(.*\\)\"\\]$/\\1/p' ~/.config/sand/git/broker.gitconfig); "
    "f=$(sed -n 's/^\\thelper = [^ ]* //p' ~/.config/sand/git/broker.gitconfig); "
    'GH_ENTERPRISE_TOKEN=$(cat "$f") gh api {args} "$b/{path}"'
)


def test_the_guests_gh_api_reaches_the_api_through_the_broker(rig) -> None:
    cli, guest, github, _ = rig
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pulls = f"{github.host}/api/v3/repos/acme/webapp/pulls"

    # Debian's gh (the workbench's): a REST read through the broker, the token attached there.
    read = as_user(guest, GH.format(args="", path=pulls))
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {"method": "GET", "path": "/api/v3/repos/acme/webapp/pulls"}
    (got,) = github.received
    assert got.headers["authorization"] == f"Bearer {cli.server.token}"

    # An operation the grant does not name: refused, the broker's words in gh's error.
    opened = as_user(guest, GH.format(args="-f head=agent/x -f base=main", path=pulls))
    assert opened.returncode != 0
    said = opened.stderr.decode()
    assert "sand broker: dev-1 may not pull-request on acme/webapp" in said, said
    assert len(github.received) == 1  # the refused one never arrived
    token = cli.server.token
    assert _guest_holding(guest, token) == []
    assert token not in cli.output and _host_holding(cli.root, token) == []
