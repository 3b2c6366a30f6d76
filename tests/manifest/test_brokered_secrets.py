"""A brokered secret (``deliver: broker``): its rules checked where they are written,
and a VM that uses one planned with those rules, never the value."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sand.broker.access import BrokerAccess
from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.manifest.broker import BrokerRules, push_allowed, repo_key
from sand.observed import Observation
from sand.plan import Plan, make_plan
from sand.plan.plan_json import plan_to_json
from sand.plan.render import render_text
from sand.plan.saved import delivered, fork_copy
from sand.provision.checks import slug
from sand.provision.secretcheck import secret_files
from sand.provision.steps import secrets_step
from sand.secrets import secret_names
from sand.survey.guest_secrets import needs_guest_check
from tests.machine_schemas import validate
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired

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


def planned(text: str) -> tuple[Plan, str]:
    """The plan of a manifest whose VMs do not exist yet, and its text."""
    empty = {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}
    plan = make_plan(desired(text), empty, POLICIES)
    return plan, render_text(plan)


def test_the_plan_shows_a_brokered_secret_by_its_rules(monkeypatch):
    monkeypatch.setenv("SAND_TEST_GH", "ghp_brokerCanary0123456789")
    plan, text = planned(brokered())
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
            BROKERED.replace("repos:\n", "  GH_TOKEN_BROKER_URL: {from: {env: X}}\nrepos:\n"),
            "    secrets:\n      - {name: GH_TOKEN_BROKER_URL, scope: ~/src}\n"
            "      - {name: GH_TOKEN, scope: ~/src/}\n",
            "m.yaml:32:16: secret 'GH_TOKEN' is brokered: it sets GH_TOKEN_BROKER_URL at its "
            "scope, which secret 'GH_TOKEN_BROKER_URL' sets too; give one of them another 'env'",
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


WITH_API = BROKERED.replace(
    '      push: ["agent/*"]\n',
    '      push: ["agent/*"]\n'
    "      api: [read, pull-request]\n"
    "      hosts: [Uploads.Example.com]\n"
    '      header: "X-Api-Key: {token}"\n',
)


def test_what_the_api_and_hosts_allow_is_in_the_plan_line_and_json(monkeypatch):
    monkeypatch.setenv("SAND_TEST_GH", "ghp_brokerCanary0123456789")
    (grant,) = {vm.name: vm for vm in desired(brokered(WITH_API)).vms}["a"].brokered
    assert grant.api == ("read", "pull-request")
    assert grant.https_hosts == ("uploads.example.com",)
    plan, text = planned(brokered(WITH_API))
    assert (
        "GH_TOKEN: fetch https://git.example.com/acme/webapp.git; push agent/*; "
        "api read, pull-request; https uploads.example.com (X-Api-Key)" in text
    )
    change = next(c for c in plan_to_json(plan)["changes"] if c["vm"] == "a")
    (said,) = change["brokered"]
    assert (said["api"], said["hosts"], said["header"]) == (
        ["read", "pull-request"],
        ["uploads.example.com"],
        "X-Api-Key",
    )
    assert "ghp_brokerCanary" not in text + json.dumps(change)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("      api: [write]\n", "m.yaml:22:13: secrets.GH_TOKEN.broker.api[0]: "),
        ('      header: "Bearer {token}"\n', "write the header as 'Name: value'"),
        ('      header: "Authorization: Bearer"\n', "holds the token's place once: '{token}'"),
        ("      hosts: [https://h.example/x]\n", "no scheme ('https://') and no path"),
    ],
)
def test_an_api_or_hosts_rule_that_is_not_one_is_located(rules, expected):
    text = BROKERED.replace('      push: ["agent/*"]\n', '      push: ["agent/*"]\n' + rules)
    errors = errors_of(brokered(text))
    assert any(expected in e for e in errors), errors


def test_a_pull_request_grant_needs_branches_to_open_it_from():
    text = BROKERED.replace('      push: ["agent/*"]\n', "      api: [pull-request]\n")
    errors = errors_of(brokered(text))
    assert any("'pull-request' opens one from a pushed branch" in e for e in errors), errors


# A brokered secret for a plain HTTPS host alone: no repository, nothing to clone with it.
HOSTS_ONLY = """\
secrets:
  API_KEY:
    from: {env: SAND_TEST_API}
    deliver: broker
    broker:
      hosts: [api.example.com]
      header: "X-Api-Key: {token}"
  PLAIN:
    from: {env: SAND_TEST_PLAIN}
"""
# The grant GRANTING makes, as plan --json and status --json show it.
API_KEY_GRANT = {
    "secret": "API_KEY",
    "repositories": [],
    "push": [],
    "hosts": ["api.example.com"],
    "header": "X-Api-Key",
    "env": [{"scope": "~/src", "env": "API_KEY"}],
}
GRANTING = (
    "    secrets:\n      - {name: API_KEY, scope: ~/src/}\n      - {name: PLAIN, scope: ~/src}\n"
)


def test_a_vm_grants_itself_a_brokered_secret_in_its_secrets_never_its_value(monkeypatch):
    monkeypatch.setenv("SAND_TEST_API", "apikeyBrokerCanary0123456789")
    monkeypatch.setenv("SAND_TEST_PLAIN", "plainvalue")
    vms = {vm.name: vm for vm in desired(brokered(HOSTS_ONLY, GRANTING)).vms}
    (grant,) = vms["a"].brokered
    assert (grant.secret, grant.https_hosts, grant.env) == (
        "API_KEY",
        ("api.example.com",),
        (("~/src", "API_KEY"),),
    )
    # The plain secret still goes to the guest's tmpfs; the brokered one does not.
    assert [(s.name, s.scope) for s in vms["a"].secrets] == [("PLAIN", "~/src")]
    assert secret_names([vms["a"]]) == {"API_KEY", "PLAIN"}  # the broker needs its value

    plan, text = planned(brokered(HOSTS_ONLY, GRANTING))
    assert (
        "#   brokered (the token stays on this host) API_KEY: https api.example.com "
        "(X-Api-Key); API_KEY_BROKER_URL at ~/src" in text
    ), text
    change = next(c for c in plan_to_json(plan)["changes"] if c["vm"] == "a")
    assert change["brokered"] == [API_KEY_GRANT]
    validate("plan", plan_to_json(plan))  # the published schema knows the field
    assert "apikeyBrokerCanary" not in text + json.dumps(plan_to_json(plan))


def test_the_guest_is_sent_the_brokers_place_for_it_and_the_credential_never_the_token():
    (vm,) = [v for v in desired(brokered(HOSTS_ONLY, GRANTING)).vms if v.name == "a"]
    values = {"API_KEY": "apikeyBrokerCanary0123456789", "PLAIN": "plainvalue"}
    access = BrokerAccess("http://192.168.5.2:40123", "per-vm-credential")
    step = secrets_step(vm, values, access)
    payload = step.stdin.split(b"\0")
    assert b"apikeyBrokerCanary0123456789" not in step.stdin
    start = payload.index(b"broker-env")
    assert payload[start : start + 4] == [
        b"broker-env",
        b"~/src",
        slug("~/src").encode(),
        b"API_KEY",
    ]
    assert b"per-vm-credential" in payload and b"plainvalue" in payload
    assert "env/" + slug("~/src") + ".sh" in secret_files(vm)
    assert "git/broker" in secret_files(vm)


def test_forks_and_claimed_spares_are_granted_by_their_own_entry_only():
    text = brokered(HOSTS_ONLY, GRANTING) + (
        "  - name: f\n    from: {vm: a}\n"  # leaves out secrets: its source's entry's
        "  - name: g\n    from: {vm: a}\n    secrets: []\n"  # names none: none
        "  - name: p\n    pool: agents\n"  # a claim with no secrets of its own: none
        "  - name: q\n    pool: agents\n" + GRANTING
    )
    text = text.replace("defaults:\n", "pools:\n  agents: {warm: 1}\ndefaults:\n")
    vms = {vm.name: vm for vm in desired(text).vms}
    assert [g.secret for g in vms["f"].brokered] == ["API_KEY"]
    assert vms["g"].brokered == () and vms["p"].brokered == ()
    assert [g.secret for g in vms["q"].brokered] == ["API_KEY"]
    (spare,) = [vm for vm in vms.values() if vm.spare]
    assert spare.brokered == () and not spare.delivers_secrets


def test_a_vm_whose_only_secret_is_a_brokered_grant_is_looked_at_after_a_blind_reboot():
    # Its broker credential is on the tmpfs a reboot empties: a backend that cannot see
    # reboots has sand look, as for any VM sand delivered a secret to.
    text = brokered(HOSTS_ONLY, "    secrets: [{name: API_KEY, scope: ~/src}]\n")
    state = desired(text)
    observations = {
        name: replace(obs, reboots_visible=False) for name, obs in converged(state).items()
    }
    plan = make_plan(state, observations, POLICIES)
    looked = {c.vm for c in plan.changes if needs_guest_check(c, observations)}
    assert looked == {"a"}


def test_a_memory_fork_says_its_source_is_scrubbed_of_a_secrets_grant():
    # The source's broker credential is on its tmpfs: the memory a fork snapshots is
    # taken after the scrub, and the plan says what the fork is delivered of its own.
    text = brokered(HOSTS_ONLY, "    secrets: [{name: API_KEY, scope: ~/src}]\n")
    text += "  - name: f\n    from: {vm: a, snapshot: memory}\n"
    vms = {vm.name: vm for vm in desired(text).vms}
    assert delivered(vms["a"]) == ("API_KEY",)
    assert "secrets: its own entry's, delivered to it: API_KEY" in fork_copy(vms["f"])


def test_status_json_shows_a_vms_brokered_grants_by_their_rules(monkeypatch):
    """`status --json` lists what the broker holds for a VM beside its tmpfs secrets: a
    grant made by a VM's ``secrets:`` entry is not in ``secret_scopes`` (it never enters
    the guest), so without this field the grant was invisible there."""
    from sand.survey.status import StatusReport, _row

    monkeypatch.setenv("SAND_TEST_API", "apikeyBrokerCanary0123456789")
    monkeypatch.setenv("SAND_TEST_PLAIN", "plainvalue")
    plan, _ = planned(brokered(HOSTS_ONLY, GRANTING))
    report = StatusReport([_row(c, {}, None) for c in plan.changes], {}, []).to_json()
    validate("status", report)  # the published schema knows the field
    rows = {row["vm"]: row["desired"] for row in report["vms"]}
    assert rows["a"]["secret_scopes"] == [{"name": "PLAIN", "scope": "~/src"}]
    assert rows["a"]["brokered"] == [API_KEY_GRANT]
    assert rows["b"]["brokered"] == []
    assert "apikeyBrokerCanary" not in json.dumps(report)
