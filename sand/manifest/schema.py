"""The manifest's JSON Schema, generated from the models (checked in under sand/schemas/).

Pydantic emits draft 2020-12 (``$defs``, ``$ref`` beside other keywords); editors
built on yaml-language-server before 1.0 understand draft-07 only, so the schema is
rewritten to draft-07's keywords (``definitions``; a ``$ref`` with a description
wrapped in ``allOf``, since draft-07 ignores a ``$ref``'s siblings). The rules
``sand validate`` enforces across fields that a schema can say are added here:
exactly one secret source, ``node`` xor ``nodes``, secret names by pattern, and
the built-in value of each field a VM inherits.
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel

from sand.manifest.builtin import AS_WRITTEN
from sand.manifest.models import Manifest

DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def schema() -> dict[str, Any]:
    raw = Manifest.model_json_schema(by_alias=True, mode="validation")
    return _draft07(_with_rules(raw))


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=False) + "\n"


def _exactly_one_of(*keys: str) -> list[dict[str, Any]]:
    """One branch per key: that key set, and not to null (null counts as unset)."""
    return [{"required": [k], "properties": {k: {"not": {"type": "null"}}}} for k in keys]


def models(root: type[BaseModel] = Manifest) -> dict[str, type[BaseModel]]:
    """Every model the manifest is made of, by its schema name (its class name)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(kind: Any) -> None:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if kind.__name__ not in found:
                found[kind.__name__] = kind
                for info in kind.model_fields.values():
                    visit(info.annotation)
            return
        for arg in typing.get_args(kind):
            visit(arg)

    visit(root)
    return found


def _factory_defaults(doc: dict[str, Any]) -> None:
    """Pydantic shows no default for a field filled by a factory ([] or {}): say it."""
    for name, model in models().items():
        node = doc if model is Manifest else doc["$defs"][name]
        for field, info in model.model_fields.items():
            if info.default_factory is None:
                continue
            value = info.get_default(call_default_factory=True)
            node["properties"][info.alias or field]["default"] = (
                {} if isinstance(value, BaseModel) else value
            )


def _with_rules(doc: dict[str, Any]) -> dict[str, Any]:
    _factory_defaults(doc)
    defs = doc["$defs"]
    # A key set to null counts as unset for sand, so each branch asks for a value.
    defs["SecretSource"]["oneOf"] = _exactly_one_of("file", "env", "command")
    defs["ProxmoxConfig"]["oneOf"] = _exactly_one_of("node", "nodes")
    # patternProperties alone lets a non-matching name through.
    doc["properties"]["secrets"]["additionalProperties"] = False
    doc["properties"]["images"]["additionalProperties"] = False
    # A VM name both backend types take at the least (each adds its own rule: Proxmox
    # no '_', Lima at most 63 characters in all): labels of letters, digits, '_' and
    # '-' inside, at most 63 characters each, joined by '.'.
    name = defs["VM"]["properties"]["name"]
    label = r"([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    name["pattern"] = rf"^[A-Za-z0-9]{label}(\.[A-Za-z0-9_]{label})*$"
    name["maxLength"] = 253
    template = defs["ProxmoxConfig"]["properties"]["template"]
    template["anyOf"] = [
        {"type": "integer", "minimum": 100, "maximum": 999999999},
        {  # a vmid in a string, or a VM name that is not all digits
            "type": "string",
            "pattern": r"^(0*[1-9][0-9]{2,8}|(?![0-9]+$)[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$",
        },
    ]
    # Only the host's name: no scheme, path, credentials or whitespace.
    defs["ProxmoxConfig"]["properties"]["host"]["pattern"] = r"^[^/@\s]+$"
    for model in ("Defaults", "VM"):
        for key, prop in defs[model]["properties"].items():
            if key in AS_WRITTEN and prop.get("default") is None:
                prop["default"] = AS_WRITTEN[key]
    return doc


def _draft07(doc: dict[str, Any]) -> dict[str, Any]:
    out = _rewrite(doc)
    out["definitions"] = out.pop("$defs")
    # $schema first, as editors and people expect to read it.
    return {"$schema": DRAFT_07, **{k: v for k, v in out.items() if k != "$schema"}}


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(n) for n in node]
    if isinstance(node, str):
        # $ref, and the discriminator's mapping (an OpenAPI keyword editors may read).
        return "#/definitions/" + node[8:] if node.startswith("#/$defs/") else node
    if not isinstance(node, dict):
        return node
    out = {k: _rewrite(v) for k, v in node.items()}
    if isinstance(out.get("$ref"), str) and len(out) > 1:
        siblings = {k: v for k, v in out.items() if k != "$ref"}
        return {"allOf": [{"$ref": out["$ref"]}], **siblings}
    return out


if __name__ == "__main__":  # scripts/publish-schemas: the checked-in file made anew
    import sys

    sys.stdout.write(schema_text())
