"""A plan as JSON (``sand plan --json``; sand/schemas/plan.schema.json): the same records
the text renderer reads, serialised."""

from __future__ import annotations

from typing import Any

from sand.backends.protocol import RecoveryDecision
from sand.plan.model import Action, BaseChange, FieldChange, GuestAction, Plan, VMChange
from sand.terminal import one_line

_THEN = {
    "create": "create",
    "update": "update in place",
    "reprovision": "reprovision",
    "replace": "replace",
    "delete": "destroy",
}


def recovery_line(plan: Plan, decision: RecoveryDecision) -> str:
    """The "will recover: delete half-made clone 123, then create" line of a decision."""
    change = plan.change_for(decision.backend, decision.vm)
    then = _THEN.get(change.verb) if change is not None else None
    if change is not None and plan.finishes(change):
        then = "finish it"
    return f"will recover: {decision.summary}" + (f", then {then}" if then else "")


def shared_stops(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Each fork this plan copies with one stop of its source, and the other forks of that
    stop (the forks of one source and one ``force`` are copied together)."""
    groups: dict[tuple[str, str, bool], list[str]] = {}
    for c in plan.actionable():
        fork = c.desired.fork if c.action is Action.CREATE and c.desired is not None else None
        if fork is not None and fork.stops_source and c.claim is None:
            groups.setdefault((c.backend, fork.source, fork.force), []).append(c.vm)
    return {
        vm: tuple(n for n in names if n != vm)
        for names in groups.values()
        if len(names) > 1
        for vm in names
    }


# Bumped only when a key is removed or changes meaning; new keys keep the version.
# sand/schemas/plan.schema.json describes it; docs/output.md explains it.
PLAN_FORMAT_VERSION = "2"


def plan_to_json(plan: Plan) -> dict[str, Any]:
    add, chg, destroy = plan.counts()

    def fields(items: tuple[FieldChange, ...]) -> list[dict[str, Any]]:
        return [
            {
                "field": f.field,
                "before": f.before,
                "after": f.after,
                "forces_replacement": f.forces_replacement,
                "requires_restart": f.requires_restart,
                "pending_reboot": f.pending_reboot,
            }
            for f in items
        ]

    data: dict[str, Any] = {
        "format_version": PLAN_FORMAT_VERSION,
        "project": plan.project,
        "refresh_only": plan.refresh_only,
        "observed_fingerprint": plan.observed_fingerprint,
        "changes": [
            {
                "vm": c.vm,
                "backend": c.backend,
                "action": c.verb,
                "identity": c.identity,
                "fields": fields(c.fields),
                "drift": fields(c.drift),
                "reasons": list(c.reasons),
                # What apply does inside the guest; a blocked change does nothing.
                "guest": (c.guest if c.acts else GuestAction.NONE).value,
                "reprovision": c.acts and c.guest is GuestAction.PROVISION,
                "secrets_only": c.acts and c.guest is GuestAction.SECRETS,
                "requires_restart": c.requires_restart,
                "blocked_action": c.would,
                "blockers": [
                    {
                        "reason": b.reason,
                        "where": b.where or None,
                        "kind": b.kind,
                        "details": list(b.details),
                    }
                    for b in c.blockers
                ],
                "strategy": c.strategy.value if c.strategy else None,
                "work_preserved": list(c.work_preserved),
                # By their rules: a brokered secret's value never leaves this host.
                "brokered": [g.as_data() for g in c.desired.brokered] if c.desired else [],
                # Every field the VM is to have (what a create's text lists with `+`);
                # None for a delete. Sizes in bytes, as in `fields`.
                "desired": c.desired.infra() if c.desired is not None else None,
                # Made by a create a killed run left open, kept by the journal's replay:
                # this apply finishes it (counted in summary.finish, not add or change).
                "finishes_interrupted_create": plan.finishes(c),
            }
            for c in plan.changes
        ],
        "summary": {
            "add": add,
            "finish": plan.finish_count(),
            "change": chg,
            "destroy": destroy,
            "has_changes": plan.has_changes,
        },
        "unknown_backends": dict(plan.unknown_backends),
        "warnings": list(plan.warnings),
        "recovery": [d.to_json_dict() | {"line": recovery_line(plan, d)} for d in plan.recovery],
    }
    shared = shared_stops(plan)
    # Only when there are any, so every other plan reads as it always has.
    for c, out in zip(plan.changes, data["changes"], strict=True):
        if c.base is not None:
            out["base"] = c.base
        if c.out_of_date is not None:
            out["out_of_date"] = c.out_of_date
        if c.sleep is not None:
            out["sleep"] = {
                "how": c.sleep.how,
                "idle_seconds": c.sleep.idle_for,
                "why": c.sleep.why,
            }
            # What its saved memory holds, or why none is saved (docs/security.md).
            for key in ("scrubbed", "kept", "held"):
                if getattr(c.sleep, key):
                    out["sleep"][key] = list(getattr(c.sleep, key))
        if c.asleep is not None:
            out["asleep"] = {
                "how": c.asleep.how,
                "since": c.asleep.since_utc(),
                "by": c.asleep.by,
            }
        fork = c.desired.fork if c.desired is not None else None
        if fork is not None and (c.blocked_action or c.action) is Action.CREATE:
            # Made from its source at apply time (docs/fork-and-pools.md).
            out["fork_of"] = {
                "vm": fork.source,
                "memory": fork.memory,
                "stops_source": fork.stops_source,
                "force": fork.force,
                # The other forks copied during the same stop of the source.
                "stop_shared_with": list(shared.get(c.vm, ())),
            }
        out.update(_pool_keys(c))
        source = c.desired.generated if c.desired is not None else None
        if source is not None:
            # The item's text is anyone's: one inert line, as the plan's text shows it.
            title = one_line(source.title, 200)
            out["generated"] = {"generator": source.generator, "item": source.item, "title": title}
    if plan.bases:
        data["bases"] = [base_to_json(b) for b in plan.bases]
    # Only when asked for, so every other plan reads as it always has.
    if plan.targets:
        data["targets"] = list(plan.targets)
    if plan.replacements:
        data["replace"] = list(plan.replacements)
    return data


def base_to_json(base: BaseChange) -> dict[str, Any]:
    d = base.desired
    return {
        "backend": base.backend,
        "name": base.name,
        "action": base.action.value,
        "fingerprint": base.fingerprint,
        "identity": base.identity,
        "reasons": list(base.reasons),
        "for_vms": list(base.for_vms),
        "desired": (
            {
                "from": d.source,
                "user": d.user,
                "packages": list(d.content.packages),
                "agents": list(d.content.agents),
                "docker": d.docker,
                "steps": [s.name for s in d.content.steps],
                "declared": d.declared,
            }
            if d is not None
            else None
        ),
    }


def _pool_keys(c: VMChange) -> dict[str, Any]:
    """A warm pool's part in a change (docs/fork-and-pools.md): the spare a new VM
    claims, or the pool a spare belongs to and the slot it refills."""
    out: dict[str, Any] = {}
    if c.claims is not None and c.desired is not None:
        identity = c.claim.identity if c.claim is not None else None
        out["claims"] = {"pool": c.desired.pool, "spare": c.claims, "identity": identity}
    pool = c.desired.spare_of if c.desired is not None else ""
    if not pool and c.desired is None and c.observed is not None and c.observed.marker:
        pool = c.observed.marker.pool
    if pool:
        out["spare_of"] = pool
    if c.refill is not None:
        out["refill"] = {"slot": c.refill[0], "warm": c.refill[1]}
    return out
