"""What an apply did, told to a person (or as the last line of ``apply --json``): used
by ``sand apply`` and by each run of ``sand apply --watch``."""

from __future__ import annotations

import sys
from typing import Any

from sand.apply.reconcile import ApplyOutcome
from sand.cli.progress import write_json_line
from sand.redaction import redact
from sand.terminal import continued


def outcome_record(outcome: ApplyOutcome) -> dict[str, Any]:
    """The last line of ``apply --json``: one result per VM acted on and how it ended
    (and per golden base built or deleted, only when there were any)."""
    results = outcome.result.results if outcome.result is not None else []
    record: dict[str, Any] = {
        "results": [
            {
                "vm": r.vm,
                "backend": r.backend,
                "action": r.action,
                "ok": r.ok,
                "layer": r.layer,
                "error": redact(r.error),
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
        "ok": outcome.ok,
        "converged": outcome.converged,
        "not_converged": outcome.not_converged(),
        "seconds": round(outcome.seconds, 3),
        "warnings": [redact(w) for w in outcome.warnings],
    }
    bases = outcome.result.bases if outcome.result is not None else []
    if bases:
        record["base_results"] = [
            {
                "base": b.base,
                "backend": b.backend,
                "action": b.action,
                "ok": b.ok,
                "layer": b.layer,
                "error": redact(b.error),
                "seconds": round(b.seconds, 3),
                "detail": b.detail,
            }
            for b in bases
        ]
    return record


def report_outcome(outcome: ApplyOutcome, as_json: bool) -> None:
    if as_json:
        write_json_line(sys.stdout, "outcome", outcome_record(outcome))
        return
    said, warnings = outcome_text(outcome)
    print("\n" + said)
    for warning in warnings:
        print(warning, file=sys.stderr)


def outcome_text(outcome: ApplyOutcome) -> tuple[str, list[str]]:
    """What an apply that ran did, in sand apply's words: the summary (one line, or the
    failed VMs each on its own), and the warnings that go to stderr."""
    plan, result = outcome.plan, outcome.result
    assert result is not None  # only called after something ran
    failures = result.failures()
    lines: list[str] = []
    for b in result.bases:
        if b.ok:
            lines.append(f"golden base {b.base} ({b.backend}): {b.action}: {b.detail}")
        else:
            lines.append(
                f"golden base {b.base} ({b.backend}) failed to {b.action} [{b.layer}]: "
                f"{continued(b.error)}"
            )
    if not failures and not result.base_failures():
        add, chg, destroy = plan.counts()
        said = (
            f"Apply complete! Resources: {add} added, {chg} changed, {destroy} destroyed "
            f"({outcome.seconds:.1f}s)."
        )
    elif failures:
        said = f"Apply finished with {len(failures)} failed VM(s):"
        for f in failures:
            said += f"\n  {f.vm} ({f.backend}) [{f.layer}]: {continued(f.error)}"
    else:
        said = "Apply finished: a golden base failed (above); its VMs were not changed."
    if lines:
        said = "\n".join(lines) + "\n" + said
    warnings = [f"Warning: {warning}" for warning in outcome.warnings]
    if plan.targets:
        warnings.append(
            "Warning: Applied changes may be incomplete: only "
            f"{', '.join(plan.targets)} planned (--target); plan again without it to see "
            "what else the manifest asks for."
        )
    return said, warnings
