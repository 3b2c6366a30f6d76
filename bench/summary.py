"""The figures of one ``bench/run.py`` run gathered into one table, each beside what it
is judged against: its floor or baseline (with the ratio), the tree before the change
(``--before REF``, with the ratio), and its goal.

Sections call :func:`record` as they measure; ``bench/run.py`` prints :func:`table`
last, so the one command prints every figure the issue asks for in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str  # "ms", "s", "MiB", "requests/VM", "calls/VM", ...
    baseline: tuple[str, float] | None = None  # (what, its value): value / baseline
    before: float | None = None  # the same figure measured on the tree before
    goal: str = ""  # "≤ 300 ms": said as the issue says it


FIGURES: list[Figure] = []


def record(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: tuple[str, float] | None = None,
    before: float | None = None,
    goal: str = "",
) -> None:
    FIGURES.append(Figure(name, value, unit, baseline, before, goal))


def _amount(value: float, unit: str) -> str:
    digits = 0 if unit in ("ms", "MiB") or value >= 100 else (1 if value >= 10 else 2)
    return f"{value:.{digits}f} {unit}"


def table(figures: list[Figure] | None = None) -> list[str]:
    """The summary, one line a figure: value, against its baseline, against before,
    goal. Ratios are value / other: below 1 is faster (or fewer) than the other."""
    rows = [("figure", "value", "baseline (ratio)", "before (ratio)", "goal")]
    for f in FIGURES if figures is None else figures:
        base = ""
        if f.baseline is not None:
            what, amount = f.baseline
            ratio = f" ({f.value / amount:.2f}x)" if amount else ""
            base = f"{what} {_amount(amount, f.unit)}{ratio}"
        before = ""
        if f.before is not None:
            before = _amount(f.before, f.unit)
            before += f" ({f.value / f.before:.2f}x)" if f.before else ""
        rows.append((f.name, _amount(f.value, f.unit), base, before, f.goal))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
