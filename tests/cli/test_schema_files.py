"""The JSON Schemas as a user's tools load them: shipped in the package, printed by
``sand schema --output``, and followed by a plain validator (check-jsonschema, and
jsonschema's ``referencing`` with nothing but the files) through their ``$ref``s."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from jsonschema import Draft7Validator
from referencing import Registry, Resource

from tests.cli.helpers import Sand

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("plan", "status", "apply", "doctor", "audit")


def test_the_schemas_are_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["sand"]
    shipped = files("sand") / "schemas"
    for name in (*NAMES, "sand"):
        assert (shipped / f"{name}.schema.json").is_file()
        assert any(fnmatch.fnmatch(f"schemas/{name}.schema.json", g) for g in globs), globs


@pytest.mark.parametrize("name", NAMES)
def test_schema_output_prints_the_shipped_file(tmp_path, name):
    proc = Sand(tmp_path).run("schema", "--output", name)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (files("sand") / "schemas" / f"{name}.schema.json").read_text()
    Draft7Validator.check_schema(json.loads(proc.stdout))


def from_the_files_alone() -> Draft7Validator:
    """A validator of apply lines knowing only the files: no registry filled by hand, a
    retriever that reads the shipped directory (what any validator given it does)."""
    shipped = files("sand") / "schemas"

    def retrieve(uri: str) -> Resource:
        return Resource.from_contents(json.loads((shipped / uri).read_text()))

    apply = json.loads((shipped / "apply.schema.json").read_text())
    return Draft7Validator(apply, registry=Registry(retrieve=retrieve))


def test_plain_validators_follow_the_refs(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "s-1"}]))
    proc = sand.run("apply", "--auto-approve", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    # A plan line whose plan is no plan: it fails only if the $ref was followed.
    bad = {"format_version": "2", "type": "plan", "plan": {}, "recovered": []}
    validator = from_the_files_alone()
    assert all(validator.is_valid(line) for line in lines)
    assert not validator.is_valid(bad)

    instances = []
    for i, line in enumerate([*lines, bad]):
        path = tmp_path / f"line-{i}.json"
        path.write_text(json.dumps(line))
        instances.append(str(path))
    schema = files("sand") / "schemas" / "apply.schema.json"
    check = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema)]
    proc = subprocess.run([*check, *instances[:-1]], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([*check, instances[-1]], capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_the_published_schemas_are_the_shipped_ones():
    """schemas/ at the top of the repository is what people link to; it is the package's
    sand/schemas/, copied by scripts/publish-schemas, and never drifts from it."""
    shipped = {p.name: p.read_bytes() for p in (ROOT / "sand" / "schemas").glob("*.json")}
    published = {p.name: p.read_bytes() for p in (ROOT / "schemas").glob("*.json")}
    assert published == shipped, "run scripts/publish-schemas"
