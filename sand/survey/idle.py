"""The idle policy's facts, read for a plan: who uses each guest, and what sleeps.

Asked only of running VMs with an ``idle:`` policy whose plan is otherwise a no-op (a
VM with work to do is not put to sleep this run), by the deep check's one exchange
(:func:`sand.survey.health.probe_guest`: its presence line and the agents' state),
at most :data:`~sand.survey.health.DEEP_PARALLELISM` at a time, each within
:data:`READ_TIMEOUT`. A guest that does not answer gives no facts, and is not idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sand.backends.protocol import Backend
from sand.defaults import GUEST_SSH_TRY
from sand.plan.idle import Asleep
from sand.plan.model import Plan
from sand.state.asleep import load_asleep

if TYPE_CHECKING:
    from sand.survey.health import Findings

# One SSH try's patience (every path's, sand.defaults) and a few seconds for the check:
# a loaded host's guest that takes 11 s to log in is still asked, not taken for one
# that does not answer (then the run's own read of its agents would ask it again).
READ_TIMEOUT = GUEST_SSH_TRY + 5.0


def asleep_records(project: str) -> dict[str, Asleep]:
    """This host's record of the VMs sand put to sleep, by VM name, as the plan reads it."""
    return {r.name: Asleep(r.how, r.since, r.by, r.identity) for r in load_asleep(project).values()}


async def read_guests(
    plan: Plan, backends: Mapping[str, Backend], *, timeout: float = READ_TIMEOUT
) -> dict[str, Findings]:
    """VM name -> what its guest told in the one exchange (who used it: ``presence``;
    its agents' state: ``agents``), for each candidate to sleep."""
    idle = {
        c.vm
        for c in plan.changes
        if not c.acts and c.asleep is None and c.desired and c.desired.idle and c.desired.provision
    }
    if not idle:
        return {}
    # here, not at the top: a fleet with no idle policy plans without the deep check
    from sand.survey.health import check_health, targets

    todo = [t for t in targets(plan, backends) if t.vm.name in idle]
    if not todo:
        return {}
    return await check_health(todo, timeout=timeout)
