"""Manifest loading: located errors (golden), sizes, strictness, schema, fuzzing."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.manifest.schema import schema_text
from sand.manifest.sizes import format_size, parse_size
from tests.plan.helpers import MANIFEST

ROOT = Path(__file__).resolve().parents[2]


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def test_example_manifests_are_valid_and_carry_the_schema_comment():
    from sand.manifest import load_manifest

    examples = sorted((ROOT / "manifests").glob("*.yaml"))
    assert examples
    for path in examples:
        assert path.read_text().startswith("# yaml-language-server: $schema=")
        load_manifest(path)


GOLDEN = [
    # (manifest text, expected problems in order)
    (
        MANIFEST.replace("    memory: 16GiB", "    memroy: 16GiB"),
        ["m.yaml:21:5: unknown key 'memroy'; did you mean 'memory'?"],
    ),
    (
        MANIFEST.replace("    memory: 16GiB", "    memory: lots"),
        [
            "m.yaml:21:13: vms[1].memory: 'lots' is not a size; write it like '8GiB', "
            "'512MiB' or '40G'"
        ],
    ),
    (
        MANIFEST.replace("  - name: a\n", '  - name: a\n    cpus: "2"\n'),
        ["m.yaml:20:11: vms[0].cpus: Input should be a valid integer"],
    ),
    (
        MANIFEST.replace("    backend: laptop", "    backend: nowhere"),
        ["m.yaml:23:14: unknown backend 'nowhere' (defined: laptop, pve)"],
    ),
    (
        MANIFEST.replace("  - name: b\n", "  - name: a\n"),
        ["m.yaml:20:11: VM name 'a' is already used by vms[0]"],
    ),
    (
        MANIFEST.replace("  - name: a\n", "  - name: a_1\n"),
        [
            "m.yaml:19:11: VM name 'a_1' is not valid on Proxmox: use letters, digits and '-' "
            "(a DNS name), not starting or ending with '-'"
        ],
    ),
    (
        MANIFEST.replace("    node: pve1\n", ""),
        ["m.yaml:5:5: backends.pve: set exactly one of 'node' (one node) or 'nodes' (placement)"],
    ),
    (
        MANIFEST.replace("  - name: a\n", "  - name: a\n    ports: [{guest: 1, host: 2}]\n"),
        [
            "m.yaml:20:12: ports are forwarded only on Lima; a Proxmox VM has its own address "
            "on the bridge, so reach its ports there"
        ],
    ),
    (
        MANIFEST.replace("project: demo", "project: demo\nproject: again"),
        ["m.yaml:3:1: duplicate key 'project'"],
    ),
    ("apiVersion: sand/v1\nproject: [unclosed\n", None),  # YAML syntax: located, one problem
    ("", ["m.yaml:1:1: the manifest is empty"]),
    ("- a\n- b\n", ["m.yaml:1:1: the manifest must be a mapping of keys"]),
    (
        MANIFEST.replace("apiVersion: sand/v1", "apiVersion: sand/v2"),
        ["m.yaml:1:13: apiVersion: Input should be 'sand/v1'"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), GOLDEN)
def test_golden_errors(text, expected):
    got = errors_of(text)
    if expected is None:
        assert len(got) == 1
        assert got[0].startswith(("m.yaml:2:", "m.yaml:3:"))
    else:
        assert got == expected


def test_every_problem_is_reported_at_once():
    text = (
        MANIFEST.replace("    memory: 16GiB", "    memroy: 16GiB")
        .replace("    backend: laptop", "    backend: nowhere")
        .replace("  cpus: 2\n", "  cpus: 0\n")
    )
    got = errors_of(text)
    assert len(got) == 3
    assert [g.split(":")[1] for g in got] == sorted((g.split(":")[1] for g in got), key=int)


def test_secret_sources_take_exactly_one_kind_and_no_values():
    text = MANIFEST + "secrets:\n  TOKEN:\n    from: {env: A, file: b}\n"
    assert errors_of(text) == [
        "m.yaml:28:11: secrets.TOKEN.from: a secret comes from exactly one of 'file', 'env' or "
        "'command'"
    ]
    text = MANIFEST + "secrets:\n  TOKEN:\n    value: hunter2\n"
    got = errors_of(text)
    assert any("unknown key 'value'" in g for g in got)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8GiB", 8 << 30),
        ("8G", 8 << 30),
        ("512MiB", 512 << 20),
        ("1.5GiB", 3 << 29),
        ("1024B", 1024),
    ],
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "GiB", "-1G", "8 parsecs", True, 0, 1.5, 1024, "512"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size_round_trips():
    for size in (1, 1023, 1 << 20, 8 << 30, 3 << 29):
        assert parse_size(format_size(size)) == size


def test_checked_in_schema_matches_the_models():
    checked_in = (ROOT / "sand" / "schemas" / "sand.schema.json").read_text()
    regenerate = "regenerate with: scripts/publish-schemas"
    assert checked_in == schema_text(), regenerate
    schema = json.loads(checked_in)
    assert schema["additionalProperties"] is False
    assert "apiVersion" in schema["required"]


def test_alias_bomb_is_refused_without_hanging():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    got = errors_of(bomb)
    assert "expands to more than 200000 values" in got[-1]


yaml_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text_never_raises_anything_but_manifest_error(text):
    try:
        parse_manifest(text, "f.yaml")
    except ManifestError as exc:
        assert all(p.line >= 1 and p.column >= 1 for p in exc.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_like, st.sampled_from(["vms", "backends", "defaults", "secrets", "repos", "project"]))
def test_fuzz_structured_values_in_every_section(value, key):
    import yaml

    base = yaml.safe_load(MANIFEST)
    base[key] = value
    text = yaml.safe_dump(base)
    try:
        parse_manifest(text, "f.yaml")
    except ManifestError as exc:
        assert exc.problems


def test_fuzz_mutated_manifest_lines():
    """Delete or duplicate each line of a valid manifest: never a traceback."""
    lines = MANIFEST.splitlines(keepends=True)
    for i in range(len(lines)):
        for variant in (lines[:i] + lines[i + 1 :], lines[: i + 1] + lines[i:]):
            with contextlib.suppress(ManifestError):
                parse_manifest("".join(variant), "f.yaml")


def test_cli_validate_reports_file_line_column_and_exits_1(tmp_path):
    bad = tmp_path / "sand.yaml"
    bad.write_text(MANIFEST.replace("    memory: 16GiB", "    memroy: 16GiB"))
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "validate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert f"{bad}:21:5: unknown key 'memroy'" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_manifest_reference_doc_is_generated_from_the_models():
    from sand.manifest.reference import render

    checked_in = (ROOT / "docs" / "manifest.md").read_text()
    hint = "regenerate: python -m sand.manifest.reference > docs/manifest.md"
    assert checked_in == render(), hint
