"""Fold what was learnt after planning into the plan: still pure data in, data out.

The planner decides what each VM needs from the manifest and the listings alone.
Two checks then run against the world before a person sees the plan — the
backend's preflight (does the template, storage, node... exist; do the sizes
fit) and the unpushed-work sweep of VMs about to be deleted or replaced — and
their findings arrive here as plain records. A change with a blocker is shown as
``!`` with every reason; apply never runs it. So what is approved is what runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sand.plan.model import Action, Blocker, Plan, Strategy, VMChange

Key = tuple[str, str]  # (backend, vm name)


def key_of(change: VMChange) -> Key:
    return change.backend, change.vm


def with_blockers(plan: Plan, blockers: Mapping[Key, tuple[Blocker, ...]]) -> Plan:
    """Every change named in ``blockers`` becomes BLOCKED, keeping what it would have done."""
    if not blockers:
        return plan
    changes = []
    for change in plan.changes:
        found = blockers.get(key_of(change))
        changes.append(block(change, found) if found else change)
    return replace(plan, changes=tuple(changes))


def block(change: VMChange, blockers: tuple[Blocker, ...]) -> VMChange:
    if change.action is Action.BLOCKED:
        return replace(change, blockers=change.blockers + blockers)
    return replace(
        change,
        action=Action.BLOCKED,
        blocked_action=change.action,
        blockers=change.blockers + blockers,
    )


def with_strategies(plan: Plan, strategies: Mapping[Key, Strategy]) -> Plan:
    """Set the replacement strategy a backend chose (create-before-destroy by default)."""
    if not strategies:
        return plan
    changes = tuple(
        replace(c, strategy=strategies[key_of(c)])
        if c.action is Action.REPLACE and key_of(c) in strategies
        else c
        for c in plan.changes
    )
    return replace(plan, changes=changes)


def with_preserved_work(plan: Plan, covered: Mapping[Key, tuple[str, ...]]) -> Plan:
    """Note, per change, the unpushed work the sweep found that preserve: paths keep."""
    if not covered:
        return plan
    changes = tuple(
        replace(c, work_preserved=covered[key_of(c)]) if key_of(c) in covered else c
        for c in plan.changes
    )
    return replace(plan, changes=changes)
