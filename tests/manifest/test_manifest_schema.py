"""The manifest's JSON Schema as an editor reads it: draft-07 keywords only, every
property described with its default and an example, the rules a schema can state
(secret names, one secret source, node xor nodes, sizes with units) stated, every
example manifest accepted, and known-bad manifests refused by both the schema and
`sand validate`."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.manifest.schema import schema
from tests.plan.helpers import MANIFEST, desired

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = schema()
VALIDATOR = Draft7Validator(SCHEMA)
# Keywords of 2019-09/2020-12 that draft-07 tools (yaml-language-server < 1.0) reject
# or misread.
NEWER = {
    "$defs",
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "dependentRequired",
    "dependentSchemas",
    "$anchor",
    "$dynamicRef",
    "$recursiveRef",
}


def walk(node: Any, path: str = "#"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}/{i}")


def properties():
    yield "Manifest", SCHEMA
    yield from SCHEMA["definitions"].items()


def schema_errors(data: dict[str, Any]) -> list[str]:
    return [e.message for e in VALIDATOR.iter_errors(data)]


def test_the_schema_is_draft_07():
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(SCHEMA)
    for path, node in walk(SCHEMA):
        assert not NEWER & set(node), f"{path} uses {NEWER & set(node)}"
        if "$ref" in node:
            # draft-07 ignores a $ref's siblings: a description there would be lost.
            assert set(node) == {"$ref"}, f"{path}: $ref with siblings {set(node)}"
            assert node["$ref"].startswith("#/definitions/")


def test_every_property_has_a_description_a_default_and_an_example():
    missing = []
    for model, node in properties():
        required = set(node.get("required", ()))
        for key, prop in node["properties"].items():
            lacks = [k for k in ("description", "examples") if not prop.get(k)]
            if key not in required and "default" not in prop:
                lacks.append("default")
            if lacks:
                missing.append(f"{model}.{key}: {lacks}")
    assert not missing, "\n".join(missing)


def test_every_example_is_valid_for_its_own_property():
    for model, node in properties():
        for key, prop in node["properties"].items():
            sub = Draft7Validator({**prop, "definitions": SCHEMA["definitions"]})
            for example in prop["examples"]:
                problems = [e.message for e in sub.iter_errors(example)]
                assert not problems, f"{model}.{key} example {example!r}: {problems}"


def test_inherited_fields_show_the_built_in_defaults():
    vm = SCHEMA["definitions"]["VM"]["properties"]
    assert vm["cpus"]["default"] == 2
    assert vm["memory"]["default"] == "8GiB"
    assert vm["disk"]["default"] == "100GiB"
    assert vm["agents"]["default"] == ["claude"]
    assert vm["state"]["default"] == "running"
    # What the desired state applies to a VM that sets nothing.
    bare = desired(MANIFEST).vms[0]
    assert (bare.cpus, bare.memory, bare.disk, bare.state) == (2, 8 << 30, 100 << 30, "running")
    reference = (ROOT / "docs" / "manifest.md").read_text()
    assert "| `cpus` | integer \\| null | `2` |" in reference
    assert "| `memory` | size | `8GiB` |" in reference


EXAMPLES = sorted((ROOT / "manifests").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_manifest_validates_against_the_schema(path):
    assert schema_errors(yaml.safe_load(path.read_text())) == []


def base() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST)
    data["secrets"] = {"TOKEN": {"from": {"env": "SAND_TOKEN"}}}
    return data


def bad(edit) -> dict[str, Any]:
    data = copy.deepcopy(base())
    edit(data)
    return data


def _set(path: str, value: Any):
    def edit(data: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node = data
        for key in head:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return edit


_DELETE = object()

BAD = {
    "secret-name-with-dash": lambda d: d["secrets"].update({"MY-TOKEN": {"from": {"env": "X"}}}),
    "secret-name-leading-digit": lambda d: d["secrets"].update({"1X": {"from": {"env": "X"}}}),
    "two-secret-sources": _set("secrets.TOKEN.from", {"env": "A", "file": "b"}),
    "no-secret-source": _set("secrets.TOKEN.from", {}),
    "node-and-nodes": _set("backends.pve.nodes", ["pve1", "pve2"]),
    "neither-node-nor-nodes": _set("backends.pve.node", _DELETE),
    "bare-number-memory": _set("vms.0.memory", 8),
    "unitless-memory-string": _set("vms.0.memory", "8192"),
    "not-a-size": _set("defaults.disk", "lots"),
    "unknown-key": _set("vms.0.memroy", "8GiB"),
    "unknown-agent": _set("vms.0.agents", ["clippy"]),
    "unknown-rebuild": _set("vms.0.rebuild", "sometimes"),
    "image-step-name": lambda d: d.setdefault("images", {}).update(
        {"wb": {"steps": [{"name": "Not A Name", "run": "true"}]}}
    ),
    "image-step-empty": lambda d: d.setdefault("images", {}).update(
        {"wb": {"steps": [{"name": "x", "run": ""}]}}
    ),
    "image-unknown-key": lambda d: d.setdefault("images", {}).update({"wb": {"pakages": []}}),
    "image-name": lambda d: d.setdefault("images", {}).update({"Work Bench": {}}),
}


def test_the_base_of_the_bad_cases_is_valid_both_ways():
    assert schema_errors(base()) == []
    parse_manifest(yaml.safe_dump(base()), "m.yaml")


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_known_bad_manifest_fails_the_schema_and_validate(case):
    data = bad(BAD[case])
    assert schema_errors(data), f"the schema accepts {case}"
    with pytest.raises(ManifestError):
        parse_manifest(yaml.safe_dump(data), "m.yaml")


def test_a_null_secret_source_counts_as_unset_in_both():
    data = bad(_set("secrets.TOKEN.from", {"env": "A", "file": None}))
    assert schema_errors(data) == []
    parse_manifest(yaml.safe_dump(data), "m.yaml")


# --- defaults.image: honoured on Lima, refused (located) for a Proxmox VM ------------


def test_defaults_image_is_the_image_of_lima_vms_that_name_none():
    text = MANIFEST.replace("  cpus: 2\n", "  cpus: 2\n  image: ubuntu-24.04\n")
    text = text.replace("    image: debian-12\n", "")
    text = text.replace(
        "  - name: a\n  - name: b\n",
        "  - name: a\n    image: '9001'\n  - name: b\n    image: '9001'\n",
    )
    vms = {vm.name: vm for vm in desired(text).vms}
    assert vms["c"].image == "ubuntu-24.04"
    assert vms["a"].image == "template:9001@local-lvm"


def test_defaults_image_a_proxmox_vm_would_ignore_is_a_located_error(tmp_path):
    text = MANIFEST.replace("  cpus: 2\n", "  cpus: 2\n  image: ubuntu-24.04\n")
    path = tmp_path / "sand.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stdout
    assert "Traceback" not in proc.stderr
    line = text.splitlines().index("  image: ubuntu-24.04") + 1
    lines = [x for x in proc.stderr.splitlines() if "defaults.image" in x]
    # One line for each Proxmox VM that would take it (a and b), at defaults.image.
    assert len(lines) == 2, proc.stderr
    for vm, got in zip(("a", "b"), lines, strict=True):
        # At the value, as every located error is.
        assert got.startswith(f"{path}:{line}:10: defaults.image does not apply to Proxmox VM")
        assert f"VM {vm!r}" in got and "template (9000)" in got
