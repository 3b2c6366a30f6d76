"""No two modules of sand import each other, through any path: every import counted,
those inside functions and under ``TYPE_CHECKING`` too (``lint-imports`` holds the
floors; this holds what no floor names)."""

from __future__ import annotations

import grimp


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's)."""
    imports = {m: graph.find_modules_directly_imported_by(m) & graph.modules for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in imports[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = [stack.pop()]
            while group[-1] != m:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return found


def test_sand_has_no_import_circles() -> None:
    assert circles(grimp.build_graph("sand", cache_dir=None)) == []


def test_a_circle_is_found(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "loop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from loop import b\n")
    (pkg / "b.py").write_text("from loop import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles(grimp.build_graph("loop", cache_dir=None)) == [["loop.a", "loop.b"]]
