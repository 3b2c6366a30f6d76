"""A brokered secret a VM grants itself in its ``secrets:``, used from a real guest.

``sand apply`` on the limactl stand-in, a netns guest behind the instance; the
upstream is an HTTPS server on the rig's bridge that records what it receives. The
secret names a plain API host and no repository, and the VM clones nothing: its
``secrets:`` entry alone grants it. The guest's shell at that entry's scope has, from
direnv, the broker's URL and its credential's file (never the value); its curl reaches
the declared host with the real token attached by the broker; a plain secret beside it
still lands on the guest's tmpfs; and the token's bytes are in no guest file, no guest
process's environment or argv, nor sand's output or state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_apply_lima_guests import Cli
from tests.e2e.test_broker_guests import CREDENTIAL, _guest_holding, _host_holding
from tests.provision.e2e_helpers import as_user, scoped_env
from tests.rig.httpsupstream import HttpsUpstream
from tests.rig.tlscert import self_signed

pytestmark = pytest.mark.e2e

# As docs/credentials.md tells an agent: the variables direnv set at the scope; the
# credential goes to curl on stdin, never in an argv.
CURL = (
    'cd ~/work && eval "$(direnv export bash 2>/dev/null)" && '
    'printf \'Authorization: Bearer %s\\n\' "$(cat "$API_KEY_BROKER_CREDENTIAL_FILE")" | '
    "curl -sS -H @- -o ~/answer -w '%{{http_code}}' \"$API_KEY_BROKER_URL/{path}\""
)


@pytest.fixture
def rig(
    tmp_path: Path, netns_guest, monkeypatch
) -> Iterator[tuple[Cli, object, HttpsUpstream, object]]:
    from tests.rig.guest import ensure_bridge

    bridge = ensure_bridge()
    cert, key = self_signed(tmp_path, bridge)
    upstream = HttpsUpstream(bridge, cert, key)
    monkeypatch.setenv("SAND_TEST_API", f"apikey-{os.urandom(16).hex()}")
    monkeypatch.setenv("SAND_TEST_PLAIN", f"plain-{os.urandom(16).hex()}")
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    guest = netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest)
    manifest = {
        "apiVersion": "sand/v1",
        "project": "brokersecrets",
        "backends": {"laptop": {"type": "lima", "lima_home": "./lima", "derive_bases": False}},
        "secrets": {
            "API_KEY": {
                "from": {"env": "SAND_TEST_API"},
                "deliver": "broker",
                "broker": {"hosts": [upstream.host], "header": "X-Api-Key: {token}"},
            },
            "PLAIN": {"from": {"env": "SAND_TEST_PLAIN"}},
        },
        "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB"},
        "vms": [
            {
                "name": "dev-1",
                "secrets": [
                    {"name": "API_KEY", "scope": "~/work"},
                    {"name": "PLAIN", "scope": "~/work"},
                ],
            }
        ],
    }
    cli.manifest.write_text(json.dumps(manifest))
    try:
        yield cli, guest, upstream, netns_guest
    finally:
        cli.sand("destroy", "--auto-approve")
        upstream.stop()


def test_a_vm_reaches_a_declared_host_with_a_secret_its_secrets_alone_grant(rig) -> None:
    cli, guest, upstream, _ = rig
    token, plain = os.environ["SAND_TEST_API"], os.environ["SAND_TEST_PLAIN"]
    plan = cli.sand("plan")
    said = f"API_KEY: https {upstream.host} (X-Api-Key); API_KEY_BROKER_URL at ~/work"
    assert said in plan.stdout, plan.stdout + plan.stderr
    applied = cli.sand("apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr

    # At the scope: where the broker is and the credential's file, not the value; the
    # plain secret beside it is its value, as before.
    url = scoped_env(guest, "~/work", "API_KEY_BROKER_URL")
    assert url is not None and url.startswith("http://"), url
    assert scoped_env(guest, "~/work", "API_KEY") is None
    assert scoped_env(guest, "~/work", "PLAIN") == plain

    done = as_user(guest, CURL.format(path=f"{upstream.host}/v1/ping"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"200", as_user(guest, "cat ~/answer").stdout
    (called,) = upstream.received
    assert (called.path, called.headers["x-api-key"]) == ("/v1/ping", token)
    assert "authorization" not in called.headers  # the guest's credential stops at the broker

    output = "".join(p.stdout + p.stderr for p in (plan, applied))
    assert _guest_holding(guest, plain) != []  # the search finds what the guest holds
    assert _guest_holding(guest, token) == []
    assert token not in output and _host_holding(cli.root, token) == []


def test_a_fork_is_granted_by_its_own_entry_its_own_credential_or_nothing(rig) -> None:
    cli, source, _, netns_guest = rig
    applied = cli.sand("apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    inherits, names_none = netns_guest(), netns_guest()
    cli.standin.back_with_guest("try-1", inherits)  # what each clone boots as
    cli.standin.back_with_guest("try-2", names_none)
    manifest = json.loads(cli.manifest.read_text())
    manifest["vms"] += [
        {"name": "try-1", "from": {"vm": "dev-1"}},  # its source's secrets: by inheritance
        {"name": "try-2", "from": {"vm": "dev-1"}, "secrets": []},  # none of its own
    ]
    cli.manifest.write_text(json.dumps(manifest))
    forked = cli.sand("apply", "--auto-approve")
    assert forked.returncode == 0, forked.stdout + forked.stderr

    grants = cli.root / "state" / "projects" / "brokersecrets" / "broker" / "grants.json"
    assert set(json.loads(grants.read_text())) == {"dev-1", "try-1"}
    mine, its = (g.run_root(["sh", "-c", CREDENTIAL]).stdout.strip() for g in (source, inherits))
    assert mine and its and mine != its  # its own, drawn at its own delivery
    assert scoped_env(inherits, "~/work", "API_KEY_BROKER_URL") is not None
    assert names_none.run_root(["sh", "-c", CREDENTIAL]).stdout.strip() == b""
    assert scoped_env(names_none, "~/work", "API_KEY_BROKER_URL") is None
    token = os.environ["SAND_TEST_API"]
    assert all(_guest_holding(g, token) == [] for g in (source, inherits, names_none))
