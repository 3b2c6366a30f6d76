"""A package docstring that lists its modules lists all of them, or none: a list that
misses one tells a newcomer the package is smaller than it is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SAND = Path(__file__).resolve().parents[1] / "sand"


def test_a_package_docstring_lists_all_its_modules_or_none():
    partial = {}
    for init in SAND.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        package = ".".join(init.parent.relative_to(SAND.parent).parts)
        named = set(re.findall(rf":mod:`~?{re.escape(package)}\.(\w+)`", doc))
        if not named:
            continue
        modules = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
        modules |= {p.parent.name for p in init.parent.glob("*/__init__.py")}
        if named != modules:
            partial[package] = sorted(modules - named)
    assert partial == {}, f"listed in part, missing: {partial}"
