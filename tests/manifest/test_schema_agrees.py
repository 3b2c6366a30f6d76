"""The editor's schema (sand/schemas/sand.schema.json) refuses what ``sand validate``
refuses wherever JSON Schema can say it: VM names, CPU types (case included),
``expires``, template vmids, the host; and still takes what sand takes."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from tests.plan.test_cases import BASE as PLAN_CASES_BASE

SCHEMA = Path(__file__).resolve().parents[2] / "sand" / "schemas" / "sand.schema.json"
EDITOR = Draft7Validator(json.loads(SCHEMA.read_text()))
# The plan cases' two backends; defaults.backend left out: each VM names its own.
BASE: dict[str, Any] = {
    **{k: v for k, v in PLAN_CASES_BASE.items() if k != "defaults"},
    "vms": [
        {"name": "a", "backend": "pve"},
        {"name": "c", "backend": "laptop", "image": "debian-12"},
    ],
}


def vm(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["vms"][0].update(fields)


def pve(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["backends"]["pve"].update(fields)


REFUSED = {
    "name-leading-dash": vm(name="-a"),
    "name-trailing-dash": vm(name="a-"),
    "name-label-too-long": vm(name="a" * 64),
    "name-empty-label": vm(name="a..b"),
    "cpu-upper-case": vm(cpu="HOST"),
    "cpu-unknown": vm(cpu="bogus"),
    "cpu-custom-misspelt": vm(cpu="custom-1x"),
    "backend-cpu-case": pve(cpu="Host"),
    "expires-word": vm(expires="tomorrow"),
    "expires-month-13": vm(expires="2026-13-01"),
    "expires-zero": vm(expires="0m"),
    "expires-hour-25": vm(expires="2026-12-01T25:00"),
    "template-vmid-low": pve(template=5),
    "template-vmid-string-low": pve(template="42"),
    "host-with-scheme": pve(host="https://pve.test"),
    "egress-wildcard-inside": vm(egress={"domains": ["foo.*.example.org"]}),
    "egress-port-zero": vm(egress={"domains": ["github.com"], "ports": [0]}),
    "egress-policy-unknown": vm(egress={"policy": "block"}),
    "egress-unknown-key": vm(egress={"hosts": ["github.com"]}),
    "egress-cidr-a-name": vm(egress={"cidrs": ["example.org"]}),
}
TAKEN = {
    "plain": vm(),
    "name-dotted": vm(name="agent-1.team"),
    "cpu-level": vm(cpu="x86-64-v2-AES"),
    "cpu-vendor": vm(cpu="EPYC-Rome"),
    "cpu-custom": vm(cpu="custom-my_model"),
    "expires-date": vm(expires="2026-12-01"),
    "expires-instant": vm(expires="2026-12-01T18:00:00Z"),
    "expires-offset": vm(expires="2026-12-01T18:00+01:00"),
    "expires-duration": vm(expires="8h"),
    "expires-never": vm(expires="never"),
    "template-name": pve(template="debian-13"),
    "egress-deny": vm(egress={"domains": ["github.com", "*.npmjs.org"], "cidrs": ["10.0.0.0/8"]}),
    "egress-allow": vm(egress={"policy": "allow"}),
    "egress-cidr-v6": vm(egress={"cidrs": ["2001:db8::/48", "192.0.2.7"]}),
}


def manifest(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    edit(data)
    return data


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_schema_refuses_what_sand_refuses(case):
    data = manifest(REFUSED[case])
    with pytest.raises(ManifestError):
        parse_manifest(yaml.safe_dump(data))
    assert not EDITOR.is_valid(data), case


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_the_schema_takes_what_sand_takes(case):
    data = manifest(TAKEN[case])
    parse_manifest(yaml.safe_dump(data))
    errors = [e.message for e in EDITOR.iter_errors(data)]
    assert errors == [], case
