"""One word, one meaning: the ways a VM sleeps are spelled once (``sand.observed``), and
the planner reads whether a VM is hibernated from what the backend tells
(``ObservedVM.hibernated``), never from a backend's own lock word."""

from __future__ import annotations

import ast
from pathlib import Path

SAND = Path(__file__).resolve().parents[1] / "sand"
# Where the words are defined: the vocabulary, and PVE's lock word where PVE is read.
DEFINED = {"observed.py", "backends/proxmox/row.py"}


def _literals(word: str) -> list[str]:
    found = []
    for path in SAND.rglob("*.py"):
        where = str(path.relative_to(SAND))
        if where in DEFINED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == word:
                found.append(f"{where}:{node.lineno}")
    return found


def test_the_ways_of_sleeping_are_spelled_once():
    assert _literals("suspended") == []


def test_the_planner_knows_no_backend_lock():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (SAND / "plan").rglob("*.py"))
    assert ".lock ==" not in source and ".lock !=" not in source
