"""What an apply run writes to the host's audit trail (``sand.audit``): each change it
carried out, with the manifest it came from (path and SHA-256 of its text, and the
commit when ``sand sync`` applied it), and each golden base built or deleted; then a
signed checkpoint."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sand.audit.trail import record, seal
from sand.plan.model import Action, Plan, VMChange

if TYPE_CHECKING:
    from sand.apply.engine import ApplyResult
    from sand.project import Session

# ``sand sync`` applies the manifest it wrote to <mirror>/revisions/<commit>/<file>
_SYNC_REVISION = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def manifest_fields(session: Session) -> dict[str, Any]:
    path = Path(session.loaded.path)
    fields: dict[str, Any] = {
        "project": session.project,
        "manifest": str(path),
        "manifest_sha256": hashlib.sha256(session.loaded.text.encode()).hexdigest(),
    }
    if path.parent.parent.name == "revisions" and _SYNC_REVISION.fullmatch(path.parent.name):
        fields["commit"] = path.parent.name
    return fields


def audit_apply(session: Session, plan: Plan, result: ApplyResult) -> None:
    where = manifest_fields(session)
    done = {(r.backend, r.vm): r for r in result.results}
    for change in plan.changes:
        outcome = done.get((change.backend, change.vm))
        if outcome is None:
            continue  # not carried out (blocked, nothing to do, or never reached)
        fields = {
            **where,
            "vm": change.vm,
            "backend": change.backend,
            "change": outcome.action,
            "ok": outcome.ok,
            "fields": [f.field for f in change.fields],
            **({"identity": change.identity} if change.identity else {}),
            **({"error": f"[{outcome.layer}] {outcome.error}"} if not outcome.ok else {}),
        }
        kind, extra = _what(change)
        record(kind, **fields, **extra)
    for base in result.bases:
        record(
            "apply.base",
            **where,
            base=base.base,
            backend=base.backend,
            change=base.action,
            ok=base.ok,
            detail=base.detail,
        )
    if result.results or result.bases:
        seal()  # the run's records vouched for now, not after the next thousand


def _what(change: VMChange) -> tuple[str, dict[str, Any]]:
    """The record's kind, and what it adds: forks, claims and sleeps are told apart."""
    fork = change.desired.fork if change.desired is not None else None
    if change.action is Action.CREATE and change.claims:
        return "pool.claimed", {"spare": change.claims}
    if change.action is Action.CREATE and fork is not None:
        return "vm.forked", {"source": fork.source, "memory": fork.memory}
    if change.sleep is not None:
        return "vm.slept", {"by": "idle", "how": change.sleep.how, "why": change.sleep.why}
    if change.asleep is not None:
        return "vm.woken", {"by": "apply", "asleep_since": change.asleep.since}
    return "apply.change", {}
