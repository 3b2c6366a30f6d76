"""What an apply did, told to a person (or as one JSON document): used by
``sand apply`` and by each run of ``sand apply --watch``."""

from __future__ import annotations

import json
import sys
from typing import Any

from sand.apply.reconcile import ApplyOutcome
from sand.plan import Plan
from sand.plan.render import plan_to_json
from sand.terminal import continued

# Bumped only when a key is removed or changes meaning (schemas/apply.schema.json).
APPLY_FORMAT_VERSION = "1"


def apply_json(plan: Plan, results: list[dict[str, Any]], *, ok: bool) -> dict[str, Any]:
    """`apply --json`'s one document: the plan that ran and one result per VM touched."""
    return {
        "format_version": APPLY_FORMAT_VERSION,
        "plan": plan_to_json(plan),
        "results": results,
        "ok": ok,
    }


def report_outcome(outcome: ApplyOutcome, as_json: bool) -> None:
    plan, result = outcome.plan, outcome.result
    assert result is not None  # only called after something ran
    if as_json:
        results = [{k: v for k, v in r.__dict__.items() if k != "observed"} for r in result.results]
        print(json.dumps(apply_json(plan, results, ok=result.ok), indent=2, default=str))
        return
    failures = result.failures()
    if not failures:
        add, chg, destroy = plan.counts()
        print(
            f"\nApply complete! Resources: {add} added, {chg} changed, {destroy} destroyed "
            f"({outcome.seconds:.1f}s)."
        )
    else:
        print(f"\nApply finished with {len(failures)} failed VM(s):")
        for f in failures:
            print(f"  {f.vm} ({f.backend}) [{f.layer}]: {continued(f.error)}")
    for warning in outcome.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    if plan.targets:
        print(
            "Warning: Applied changes may be incomplete: only "
            f"{', '.join(plan.targets)} planned (--target); plan again without it to see "
            "what else the manifest asks for.",
            file=sys.stderr,
        )
