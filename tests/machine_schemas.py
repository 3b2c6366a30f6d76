"""Validate sand's machine output (plan, status, apply JSON) against sand/schemas/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[1] / "sand" / "schemas"


def registry() -> Registry:
    resources = []
    for name in ("plan", "status", "apply", "doctor", "audit"):
        doc = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        # No $id: a schema's $ref names its neighbour's file, as check-jsonschema finds it.
        resources.append((f"{name}.schema.json", Resource.from_contents(doc)))
    return Registry().with_resources(resources)


def validate(name: str, document: dict[str, Any]) -> None:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    Draft7Validator.check_schema(schema)
    errors = sorted(Draft7Validator(schema, registry=registry()).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
