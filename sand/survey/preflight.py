"""Ask each backend to preflight the changes planned on it, and fold the answers in.

A change the backend says would fail is shown blocked (``!``) with the reason and
the ``FILE:LINE:COL`` of the manifest field that causes it; apply never runs it,
so nothing of that VM is touched. A replacement the backend cannot hold beside
the old VM is planned destroy-before-create, and the plan says why.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sand.backends.protocol import Backend, PreflightItem, PreflightProblem, PreflightReport
from sand.errors import SandError
from sand.manifest.locate import backend_field_location, vm_field_location
from sand.plan.egress import EGRESS_BLOCKER
from sand.plan.gates import Key, with_blockers, with_strategies
from sand.plan.model import FORK_BLOCKER, Action, Blocker, Plan, Strategy, VMChange
from sand.project import Session


def items_of(changes: list[VMChange]) -> list[PreflightItem]:
    out: list[PreflightItem] = []
    for c in changes:
        if c.desired is None:
            continue
        vm = c.desired
        if vm.golden and vm.base is not None:
            # Made from a golden base: what must exist is what the base is made from.
            vm = replace(vm, image=vm.base.source)
        if c.action is Action.CREATE and c.claims is None:  # a claim takes what is there
            out.append(PreflightItem(vm, "create"))
        elif c.action is Action.REPLACE:
            out.append(PreflightItem(vm, "replace", current=c.observed))
        elif c.action is Action.UPDATE and c.fields:
            fields = tuple(f.field for f in c.fields)
            how = c.sleep.how if c.sleep is not None else ""
            out.append(PreflightItem(vm, "update", fields, c.observed, sleep=how))
    return out


async def preflight_plan(plan: Plan, session: Session) -> Plan:
    by_backend: dict[str, list[VMChange]] = {}
    for change in plan.changes:
        by_backend.setdefault(change.backend, []).append(change)
    jobs = {
        name: items_of(changes)
        for name, changes in by_backend.items()
        if name in session.backends and name not in plan.unknown_backends
    }
    jobs = {name: items for name, items in jobs.items() if items}
    if not jobs:
        return plan

    async def one(name: str, backend: Backend, items: list[PreflightItem]) -> PreflightReport:
        try:
            return await backend.preflight(items)
        except SandError as exc:
            # Preflight only looks; when it cannot, apply's own errors still stop a change.
            return PreflightReport(warnings=(f"preflight of backend {name} failed: {exc}",))

    names = list(jobs)
    reports = await asyncio.gather(*(one(n, session.backends[n], jobs[n]) for n in names))
    blockers: dict[Key, tuple[Blocker, ...]] = {}
    strategies: dict[Key, Strategy] = {}
    warnings: list[str] = []
    why_first: dict[Key, str] = {}
    for name, report in zip(names, reports, strict=True):
        warnings += [f"backend {name}: {w}" for w in report.warnings]
        for problem in report.problems:
            key = (name, problem.vm)
            blockers[key] = (*blockers.get(key, ()), _blocker(session, name, problem))
        for vm, why in report.destroy_first.items():
            strategies[(name, vm)] = Strategy.DESTROY_BEFORE_CREATE
            why_first[(name, vm)] = why
    plan = with_strategies(plan, strategies)
    if why_first:
        plan = replace(
            plan,
            changes=tuple(
                replace(c, reasons=(*c.reasons, f"destroy-before-create: {why_first[k]}"))
                if (k := (c.backend, c.vm)) in why_first
                else c
                for c in plan.changes
            ),
        )
    plan = with_blockers(plan, blockers)
    return replace(plan, warnings=(*plan.warnings, *dict.fromkeys(warnings)))


# The planner's own blockers that name a manifest field, and where to find it: a fork's
# ``from:`` (its own entry only), a VM's ``egress:`` (its own, its pool's or the defaults').
_LOCATED = {FORK_BLOCKER: ("from", False), EGRESS_BLOCKER: ("egress", True)}


def located_blockers(plan: Plan, session: Session) -> Plan:
    """Each change the planner blocked for a field of the manifest (a fork's source
    missing or not this project's, an egress policy its backend cannot enforce), with
    the ``FILE:LINE:COL`` of that field: plain data, so every plan gets it."""

    def located(change: VMChange) -> VMChange:
        if not any(b.kind in _LOCATED and not b.where for b in change.blockers):
            return change
        blockers = []
        for b in change.blockers:
            if b.kind in _LOCATED and not b.where:
                field, defaults = _LOCATED[b.kind]
                where = vm_field_location(session.loaded, change.vm, field, use_defaults=defaults)
                b = replace(b, where=where)
            blockers.append(b)
        return replace(change, blockers=tuple(blockers))

    return replace(plan, changes=tuple(located(c) for c in plan.changes))


def _blocker(session: Session, backend: str, problem: PreflightProblem) -> Blocker:
    loaded = session.loaded
    if problem.on_backend:
        where = backend_field_location(loaded, backend, problem.field)
    else:
        where = vm_field_location(
            loaded,
            problem.vm,
            problem.field,
            backend_field=problem.backend_field,
            use_defaults=not problem.skip_defaults,
        )
    return Blocker(problem.message, where=where, kind="preflight")
