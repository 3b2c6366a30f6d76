"""What the plan says of generated VMs (``generators:``, ``sand.desired.generated``).

A VM whose work item is gone (a branch deleted, an issue closed or unlabelled) is no
longer desired, so the planner deletes it as any VM the manifest leaves out, behind
the same guards; this only says why, by the generator whose name it carries. An
observed VM keeps no record of its item: its name's prefix is what tells, and the
manifest refuses a declared VM shaped like a generated one, so the prefix is enough.
"""

from __future__ import annotations

from dataclasses import replace

from sand.manifest.models import Manifest
from sand.plan.model import Action, Plan, VMChange

NOT_DECLARED = "not in the manifest"


def with_items_gone(plan: Plan, manifest: Manifest, notes: tuple[str, ...] = ()) -> Plan:
    """``plan`` with its deletions of generated VMs said as such, and ``notes`` (what
    the expansion left out: a flood held at ``max``, an item refused) among its
    warnings."""
    prefixes = {(gen.prefix or name) + "-": name for name, gen in manifest.generators.items()}
    if not prefixes:
        return plan

    def said(change: VMChange) -> VMChange:
        shown = change.blocked_action or change.action
        owner = next((g for p, g in prefixes.items() if change.vm.startswith(p)), None)
        if shown is not Action.DELETE or owner is None or NOT_DECLARED not in change.reasons:
            return change
        gone = f"its work item is gone (generator {owner})"
        reasons = tuple(gone if r == NOT_DECLARED else r for r in change.reasons)
        return replace(change, reasons=reasons)

    changes = tuple(said(c) for c in plan.changes)
    return replace(plan, changes=changes, warnings=plan.warnings + notes)
