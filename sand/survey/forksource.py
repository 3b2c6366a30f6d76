"""Whether a fork may stop its source now: what the source's agents are doing.

Where a backend copies only a stopped VM (Lima: ``limactl clone``), forking stops the
source for the copy, which ends whatever its agents are doing: a session ``working``
loses its turn, and one that waits for input (``needs-input``) loses the question it
holds, which lives only in the agent's memory. Both, and a source whose agents cannot be
read (no answer, a state file not read whole), make such a fork wait unless its entry
says ``force: true``. A source that is stopped, or runs no agents sand provisioned, has
nothing to lose.

The plan reads the sources once (:func:`blocked_forks`) and shows such a fork blocked
(``!``), located at its ``from:``; the apply looks again just before the copy
(:mod:`sand.apply.forkguard`), as the agent may have started meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

from sand.backends.protocol import Backend
from sand.plan.gates import block
from sand.plan.model import FORK_BLOCKER, Blocker, Plan, VMChange
from sand.survey.health import DEEP_TIMEOUT, Target, probe_guest


def stops_source(change: VMChange) -> bool:
    """Whether ``change`` makes a fork that stops its source, not forced: the look is due."""
    return change.stops_source


async def objection(plan: Plan, change: VMChange, backend: Backend, timeout: float) -> str:
    """Why the fork in ``change`` may not stop its source now ("": it may)."""
    assert change.desired is not None and change.desired.fork is not None
    fork = change.desired.fork
    source = plan.change_for(change.backend, fork.source)
    if source is None or source.desired is None or source.observed is None:
        return ""  # the backend refuses a source it does not have
    seen, wanted = source.observed, source.desired
    marker = seen.marker
    provisioned = bool(marker and marker.guest_fingerprint)
    if seen.power != "running" or not (wanted.provision and wanted.agents and provisioned):
        return ""
    found = await probe_guest(Target(wanted, seen, backend), timeout)
    report = getattr(found, "agents", None)
    force = f"set 'force: true' in its from: to stop {fork.source} anyway"
    if report is None or not report.known:
        why = "; ".join(found) or (report.unknown_why() if report else "") or "no agent state"
        return (
            f"the copy stops {fork.source}, and whether its agent is working could not be "
            f"read ({why}); {force}"
        )
    working = sorted({s.agent for s in report.sessions if s.state == "working"})
    if working:
        return (
            f"its agent is working ({', '.join(working)}) and the copy stops {fork.source}; "
            f"fork it when the agent is idle, or {force}"
        )
    waiting = sorted({s.agent for s in report.sessions if s.state == "needs-input"})
    if waiting:
        return (
            f"its agent waits for input ({', '.join(waiting)}) and the copy stops "
            f"{fork.source}, which ends the session holding the question; answer it "
            f"first, or {force}"
        )
    return ""


async def blocked_forks(plan: Plan, backends: Mapping[str, Backend]) -> Plan:
    """The plan with each fork that may not stop its source now blocked, saying why: one
    look per source, however many forks it has."""
    todo = [c for c in plan.changes if stops_source(c) and c.backend in backends]
    if not todo:
        return plan
    looks: dict[tuple[str, str], asyncio.Task[str]] = {}
    for change in todo:
        assert change.desired is not None and change.desired.fork is not None
        key = (change.backend, change.desired.fork.source)
        if key not in looks:
            look = objection(plan, change, backends[change.backend], DEEP_TIMEOUT)
            looks[key] = asyncio.ensure_future(look)
    await asyncio.gather(*looks.values())
    changes = []
    for change in plan.changes:
        fork = change.desired.fork if change.desired is not None else None
        said = looks.get((change.backend, fork.source)) if fork and stops_source(change) else None
        if said is not None and (why := said.result()):
            reason = f"not forking {fork.source} into {change.vm}: {why}" if fork else why
            change = block(change, (Blocker(reason, kind=FORK_BLOCKER),))
        changes.append(change)
    return replace(plan, changes=tuple(changes))
