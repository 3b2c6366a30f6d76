"""A brokered secret (``deliver: broker``): its rules checked where they are written,
and a VM that uses one planned with those rules, never the value."""

from __future__ import annotations

import json

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.manifest.broker import BrokerRules, push_allowed, repo_key
from sand.observed import Observation
from sand.plan import make_plan
from sand.plan.plan_json import plan_to_json
from sand.plan.render import render_text
from tests.plan.helpers import MANIFEST, POLICIES, desired

BROKERED = """\
secrets:
  GH_TOKEN:
    from: {env: SAND_TEST_GH}
    deliver: broker
    broker:
      repositories: [https://git.example.com/acme/webapp.git]
      push: ["agent/*"]
repos:
  webapp: {url: https://git.example.com/acme/webapp, token: GH_TOKEN}
"""


def brokered(extra: str = BROKERED, on_a: str = "    repos: [webapp]\n") -> str:
    text = MANIFEST.replace("defaults:\n", extra + "defaults:\n")
    return text.replace("  - name: a\n", "  - name: a\n" + on_a)


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def test_a_vm_cloning_a_brokered_repo_is_granted_its_rules_and_nothing_else():
    vms = {vm.name: vm for vm in desired(brokered()).vms}
    (grant,) = vms["a"].brokered
    assert grant.secret == "GH_TOKEN"
    assert grant.repositories == ("https://git.example.com/acme/webapp.git",)
    assert grant.push == ("agent/*",) and grant.hosts == ("git.example.com",)
    assert vms["b"].brokered == ()
    # VMs that broker nothing keep the guest fingerprint they had before brokering.
    assert vms["b"].guest_fingerprint == {v.name: v for v in desired().vms}["b"].guest_fingerprint


def test_the_plan_shows_a_brokered_secret_by_its_rules(monkeypatch):
    monkeypatch.setenv("SAND_TEST_GH", "ghp_brokerCanary0123456789")
    state = desired(brokered())
    empty = {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}
    plan = make_plan(state, empty, POLICIES)
    text = render_text(plan)
    assert (
        "#   brokered (the token stays on this host) GH_TOKEN: fetch "
        "https://git.example.com/acme/webapp.git; push agent/*" in text
    )
    data = plan_to_json(plan)
    change = next(c for c in data["changes"] if c["vm"] == "a")
    assert change["brokered"] == [
        {
            "secret": "GH_TOKEN",
            "repositories": ["https://git.example.com/acme/webapp.git"],
            "push": ["agent/*"],
        }
    ]
    assert "ghp_brokerCanary" not in text + json.dumps(data)


@pytest.mark.parametrize(
    ("extra", "on_a", "expected"),
    [
        (
            BROKERED.replace("    broker:\n", "    brokr:\n").replace("      repositories", "x:"),
            "",
            "",  # any located problem: the schema's own
        ),
        (
            "secrets:\n  GH_TOKEN:\n    from: {env: X}\n    deliver: broker\n",
            "",
            "m.yaml:18:14: secret 'GH_TOKEN' is brokered: say what the broker allows in its "
            "'broker' (repositories, push)",
        ),
        (
            "secrets:\n  GH_TOKEN:\n    from: {env: X}\n"
            "    broker: {repositories: [https://h.example/r]}\n",
            "",
            "m.yaml:18:13: secret 'GH_TOKEN' has broker rules but is not brokered: add "
            "'deliver: broker'",
        ),
        (
            BROKERED.replace("https://git.example.com/acme/webapp.git]", "http://h.example/r]"),
            "",
            "m.yaml:20:22: secrets.GH_TOKEN.broker.repositories[0]: a brokered repository is an "
            "https:// URL (the broker speaks git's smart HTTP)",
        ),
        (
            BROKERED.replace('"agent/*"', "refs/heads/main"),
            "",
            "m.yaml:21:14: secrets.GH_TOKEN.broker.push[0]: write a branch name or pattern "
            "without refs/heads/ (e.g. 'agent/*')",
        ),
        (
            BROKERED.replace("acme/webapp, token", "acme/other, token"),
            "",
            "m.yaml:23:17: repo 'webapp' is not among the repositories the broker of secret "
            "'GH_TOKEN' allows; add its URL to secrets.GH_TOKEN.broker.repositories",
        ),
        (
            BROKERED,
            "    secrets: [{name: GH_TOKEN, scope: ~/src}]\n",
            "m.yaml:29:22: secret 'GH_TOKEN' is brokered: its value never enters a guest, so it "
            "cannot be placed in one's environment; name it in a repo's 'token'",
        ),
    ],
)
def test_a_brokered_secrets_problems_are_located(extra, on_a, expected):
    errors = errors_of(brokered(extra, on_a))
    assert errors, "the manifest was accepted"
    if expected:
        assert expected in errors, errors


def test_the_default_branch_is_pushed_only_when_named_exactly():
    rules = BrokerRules(repositories=["https://h.example/r"], push=["agent/*", "*"])
    assert push_allowed(rules, "agent/x", "main")
    assert push_allowed(rules, "feature", "main")  # '*' is broad...
    assert not push_allowed(rules, "main", "main")  # ...but never the default branch
    named = BrokerRules(repositories=["https://h.example/r"], push=["main"])
    assert push_allowed(named, "main", "main")
    assert not push_allowed(BrokerRules(repositories=["https://h.example/r"]), "x", "main")


def test_two_spellings_of_a_repository_are_one():
    assert repo_key("https://Git.Example.com/acme/webapp.git") == repo_key(
        "https://git.example.com/acme/webapp/"
    )
    assert repo_key("https://h.example:8443/a/b") != repo_key("https://h.example/a/b")
