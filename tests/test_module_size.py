"""Modules small enough to read in one sitting: none of sand's over 400 lines. A module
that grows past it is split where its concerns part, not trimmed of comments."""

from __future__ import annotations

from pathlib import Path

LIMIT = 400
SAND = Path(__file__).resolve().parents[1] / "sand"


def test_no_module_is_over_400_lines():
    over = {
        str(p.relative_to(SAND.parent)): n
        for p in SAND.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert over == {}, f"over {LIMIT} lines: {over}"
