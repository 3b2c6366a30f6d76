"""``egress:`` in the manifest: each mistake located, and the VM's policy as desired
state carries it (the VM's own replacing its defaults' whole, in its fingerprint only
when written)."""

from __future__ import annotations

import pytest

from sand.desired import build_desired
from sand.errors import ManifestError
from sand.manifest import parse_manifest

HEAD = """\
apiVersion: sand/v1
project: demo
backends: {laptop: {type: lima}}
defaults:
  image: debian-12
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def vms(text: str):
    return {vm.name: vm for vm in build_desired(parse_manifest(text, "m.yaml")).vms}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "    egress: {domains: ['foo.*.example.org']}",
            "m.yaml:8:24: vms[0].egress.domains[0]: 'foo.*.example.org': a wildcard is "
            "only a leading '*.'",
        ),
        (
            "    egress: {domains: [192.0.2.7]}",
            "m.yaml:8:24: vms[0].egress.domains[0]: '192.0.2.7' is an address: list it "
            "under cidrs (as 192.0.2.7/32)",
        ),
        (
            "    egress: {domains: [-bad.example]}",
            "m.yaml:8:24: vms[0].egress.domains[0]: '-bad.example' is not a domain name",
        ),
        (
            "    egress: {cidrs: [10.0.0.1/8]}",
            "m.yaml:8:22: vms[0].egress.cidrs[0]: '10.0.0.1/8' has host bits set: did you "
            "mean 10.0.0.0/8?",
        ),
        (
            "    egress: {cidrs: [0.0.0.0/0]}",
            "m.yaml:8:22: vms[0].egress.cidrs[0]: '0.0.0.0/0' is every address: write "
            "policy: allow instead",
        ),
        (
            "    egress: {cidrs: [example.org]}",
            "m.yaml:8:22: vms[0].egress.cidrs[0]: 'example.org' is not a network or an address",
        ),
        (
            "    egress: {ports: [0]}",
            "m.yaml:8:22: vms[0].egress.ports[0]: Input should be greater than or equal to 1",
        ),
        (
            "    egress: {policy: allow, domains: [github.com]}",
            "m.yaml:8:13: vms[0].egress: policy 'allow' lets every destination through",
        ),
        (
            "    egress: {domains: [bücher.example]}",
            "m.yaml:8:24: vms[0].egress.domains[0]: 'bücher.example': write its ASCII form "
            "'xn--bcher-kva.example'",
        ),
        ("    egress: {policy: block}", "m.yaml:8:22: vms[0].egress.policy: Input should be"),
        ("    egress: {hosts: [github.com]}", "m.yaml:8:14: unknown key 'hosts'"),
    ],
)
def test_each_mistake_is_located_at_its_value(entry, expected):
    text = HEAD + f"vms:\n  - name: a\n{entry}\n"
    problems = errors_of(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_a_mistake_in_the_defaults_is_located_there():
    text = HEAD + "  egress:\n    cidrs: [10.1.2.3/16]\nvms:\n  - name: a\n"
    assert errors_of(text)[0].startswith("m.yaml:7:13: defaults.egress.cidrs[0]:")


def test_the_policy_is_sorted_deduplicated_and_lower_cased_with_https_by_default():
    text = HEAD + (
        "vms:\n  - name: a\n    egress:\n"
        "      domains: [GitHub.com., '*.npmjs.org', github.com]\n"
        "      cidrs: [2001:db8::/32, 10.0.0.0/8, 192.0.2.7]\n"
    )
    policy = vms(text)["a"].egress
    assert policy is not None
    assert policy.policy == "deny"
    assert policy.domains == ("*.npmjs.org", "github.com")
    assert policy.cidrs == ("10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32")
    assert policy.ports == (443,)
    assert policy.summary == "deny except 2 domains, 3 cidrs on port 443"


def test_a_vms_own_egress_replaces_the_defaults_whole():
    text = HEAD + (
        "  egress: {domains: [github.com], ports: [443, 22]}\n"
        "vms:\n  - name: a\n  - name: b\n    egress: {cidrs: [10.0.0.0/8]}\n"
        "  - name: c\n    egress: {policy: allow}\n"
    )
    found = vms(text)
    assert found["a"].egress is not None and found["a"].egress.ports == (22, 443)
    assert found["b"].egress is not None
    assert (found["b"].egress.domains, found["b"].egress.ports) == ((), (443,))
    assert found["c"].egress is not None and found["c"].egress.summary == "allow"


def test_the_fingerprint_holds_the_whole_policy_and_none_unchanged_without_one():
    plain = HEAD + "vms:\n  - name: a\n"
    one = plain + "    egress: {domains: [github.com]}\n"
    other = plain + "    egress: {domains: [gitlab.com]}\n"
    fingerprints = {vms(t)["a"].fingerprint for t in (plain, one, other)}
    assert len(fingerprints) == 3
    assert "egress" not in vms(plain)["a"].infra()  # a fleet that writes none keeps its own
    shown = vms(one)["a"].infra()["egress"]
    assert isinstance(shown, str) and shown.startswith(
        "deny except 1 domain, 0 cidrs on port 443 #"
    )


def test_a_fork_takes_its_sources_egress():
    text = HEAD + (
        "vms:\n  - name: a\n    egress: {domains: [github.com]}\n  - name: b\n    from: {vm: a}\n"
    )
    found = vms(text)
    assert found["b"].egress == found["a"].egress
