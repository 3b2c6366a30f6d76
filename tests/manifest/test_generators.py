"""``generators:`` in the manifest: a VM template per work item, each generator capped by
``max``; every bad one refused at its FILE:LINE:COL, and ``sand schema`` knows the key
(issue 43, item 1)."""

from __future__ import annotations

import json

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from tests.cli.helpers import Sand
from tests.plan.helpers import MANIFEST

GENERATED = MANIFEST.replace(
    "defaults:",
    """\
repos:
  app: {url: "https://github.com/acme/app.git"}
generators:
  triage:
    max: 10
    prefix: issue
    github: {repo: app, github: acme/app, label: sand}
    vm: {memory: 4GiB}
  work:
    max: 3
    branches: {repo: app, match: "feature/*"}
defaults:""",
)


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_generator_is_parsed_with_its_template_and_cap() -> None:
    m = parse_manifest(GENERATED)
    triage, work = m.generators["triage"], m.generators["work"]
    assert triage.max == 10 and triage.prefix == "issue" and triage.source_repo == "app"
    assert triage.github is not None and triage.github.kind == "issues"
    assert triage.github.api == "https://api.github.com"
    assert triage.vm.memory == 4 * 2**30
    assert work.branches is not None and work.branches.match == "feature/*"


@pytest.mark.parametrize(
    ("edit", "needle", "column", "message"),
    [
        (("max: 3", "max: 500"), "max: 500", 10, "generators.work.max: Input should be less"),
        (("max: 3", "max: 0"), "max: 0", 10, "generators.work.max: Input should be greater"),
        (
            ("{repo: app, match", "{repo: nope, match"),
            "repo: nope",
            22,
            "unknown repo 'nope' (defined: app)",
        ),
        (
            ("vm: {memory: 4GiB}", "vm: {name: x}"),
            "vm: {name: x}",
            16,
            "generator 'triage': a generated VM's name is its item's; leave it out",
        ),
        (
            ("vm: {memory: 4GiB}", "vm: {memroy: 4GiB}"),
            "memroy",
            10,
            "unknown key 'memroy'; did you mean 'memory'?",
        ),
        (
            (
                "    branches: {repo: app,",
                "    github: {repo: app, github: a/b, label: x}\n    branches: {repo: app,",
            ),
            "max: 3",
            5,
            "generators.work: a generator reads exactly one of 'branches' or 'github'",
        ),
        (
            ("label: sand}", "label: sand, token: NOPE}"),
            "token: NOPE",
            63,
            "unknown secret 'NOPE' (defined: none defined)",
        ),
        (("  - name: a\n", "  - name: issue-7\n"), "name: issue-7", 11, "shaped like a VM"),
        (("prefix: issue", "prefix: work"), "max: 3", 5, "names its VMs work-… as generator"),
        (
            ("generators:", "pools:\n  issue: {warm: 1}\ngenerators:"),
            "max: 10",
            5,
            "names its VMs issue-… as pool 'issue' names its spares",
        ),
    ],
)
def test_a_bad_generator_is_refused_where_it_is_written(
    edit: tuple[str, str], needle: str, column: int, message: str
) -> None:
    text = GENERATED.replace(*edit)
    (error,) = errors_of(text)
    assert error.startswith(f"m.yaml:{line_of(text, needle)}:{column}: "), error
    assert message in error


def test_sand_schema_knows_generators(tmp_path) -> None:
    result = Sand(tmp_path).run("schema")
    assert result.returncode == 0
    generators = json.loads(result.stdout)["properties"]["generators"]
    assert "work item" in generators["description"]
    definitions = json.loads(result.stdout)["definitions"]
    assert definitions["Generator"]["properties"]["max"]["maximum"] == 200
    assert "name" not in definitions["VMTemplate"]["properties"]
