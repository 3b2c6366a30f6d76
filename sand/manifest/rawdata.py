"""Reading the raw YAML data defensively: the cross-entry checks run even when schema
validation failed elsewhere, so any part may be malformed."""

from __future__ import annotations

from typing import Any

from sand.manifest.yamlmarks import Path

Finding = tuple[Path, str]
# (what two backends that look at one place share, how to say it, how to fix it)
OwnershipScope = tuple[tuple[object, ...], str, str]


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
