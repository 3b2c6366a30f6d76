"""Settle what a crashed run left half-done, and show it in the plan first.

Each unfinished journal entry is asked of its backend as a read-only *decision*
(``decide_recovery``: what replaying it does, from what the backend shows now).
``sand plan`` folds the decisions into the plan (a VM a recovery deletes is planned
as absent) and lists them before the changes; ``apply`` replays them (decide, wait
for what the killed run left running, act), settles each entry, and then plans, so
the two agree. Only the replay settles journal entries.
"""

from __future__ import annotations

from collections.abc import Mapping

from sand.backends.protocol import Backend
from sand.errors import SandError
from sand.logs import get_logger
from sand.state.journal import Journal
from sand.survey.recovered import Recovery, decide_replace, what_of


async def replay_journal(journal: Journal, backends: Mapping[str, Backend]) -> Recovery:
    """Decide and act on each backend's unfinished entries, oldest first; settle each."""
    log = get_logger()
    out = Recovery()
    # A replace is made of backend operations with entries of their own: settle those
    # first (a half-made clone is removed or adopted), then the replace around them.
    pending = sorted(journal.pending(), key=lambda e: e.op == "replace")
    for entry in pending:
        name = entry.backend
        backend = backends.get(name)
        if backend is None or name in out.failed:
            # A backend that left the manifest keeps its entries until it comes back.
            continue
        try:
            if entry.op == "replace":
                from sand.apply.replace import act_replace  # a replay of a replace only

                decision = await decide_replace(entry, backend)
                how = await act_replace(entry, backend, journal, decision)
            else:
                decision = await backend.decide_recovery(entry, wait=True)
                how = await backend.act_recovery(entry, decision)
        except SandError as exc:
            out.failed[name] = f"could not settle the interrupted {what_of(entry)}: {exc}"
            log.error("recovery failed", vm=entry.vm, op=entry.op, error=str(exc))
            continue
        journal.settle(entry.id, decision.action.value)
        log.info("recovered", vm=entry.vm, op=entry.op, outcome=how)
        out.decisions.append(decision)
        out.done.append(f"{what_of(entry)}: {how}")
    return out
