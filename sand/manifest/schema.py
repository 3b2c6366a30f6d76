"""The manifest's JSON Schema, generated from the models (checked in under schemas/)."""

from __future__ import annotations

import json
from typing import Any

from sand.manifest.models import Manifest


def schema() -> dict[str, Any]:
    return Manifest.model_json_schema(by_alias=True, mode="validation")


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=False) + "\n"
