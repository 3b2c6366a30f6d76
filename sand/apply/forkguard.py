"""The last look before a fork stops its source: is the source's agent working?

Where a backend copies only a stopped VM (Lima: ``limactl clone``), forking stops the
source for the copy, which ends whatever its agent is doing. So just before such a fork
is made, the source's agents are read the way the deep check reads them (one guest
exchange, :func:`sand.survey.health.probe_guest`), and the fork is refused while one of
them is working, or when that cannot be read, unless its entry says ``force: true``.
A source that is stopped, or runs no agents sand provisioned, has nothing to lose.

The forks one apply makes of one source are looked at once (:class:`SourceLooks`) and,
where the backend copies them together (:func:`announce_forks`), copied with one stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from sand.backends.abilities import CopiesForksTogether
from sand.backends.protocol import Backend
from sand.errors import ErrorLayer, SandError
from sand.plan.model import Action, Plan, VMChange
from sand.survey.health import DEEP_TIMEOUT, Target, probe_guest


class ForkRefused(SandError):
    """The fork would stop a source whose agent is working (or cannot be asked)."""

    layer = ErrorLayer.GUARD


def stops_source(change: VMChange) -> bool:
    """Whether ``change`` makes a fork that stops its source, not forced: the look is due."""
    fork = change.desired.fork if change.desired is not None else None
    return fork is not None and fork.stops_source and not fork.force


def _source_change(plan: Plan, change: VMChange) -> VMChange | None:
    assert change.desired is not None and change.desired.fork is not None
    source = change.desired.fork.source
    for c in plan.changes:
        if c.vm == source and c.backend == change.backend:
            return c
    return None


class SourceLooks:
    """One look per source for all of its forks in one apply: they are copied with one
    stop of it (the backend's batch), so they are refused or made together, and no look
    meets a source another fork has just stopped."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._looks: dict[tuple[str, str], asyncio.Future[str]] = {}

    async def refuse_while_working(self, change: VMChange, backend: Backend) -> None:
        """Raise :class:`ForkRefused` when ``change`` (a fork's create) would stop a
        source whose agent is working, or cannot be read; nothing when it does not stop
        its source, is forced, or the source has no agent to ask."""
        if not stops_source(change):
            return
        assert change.desired is not None and change.desired.fork is not None
        source = change.desired.fork.source
        key = (change.backend, source)
        look = self._looks.get(key)
        if look is None:
            look = asyncio.ensure_future(_look(self._plan, change, backend, DEEP_TIMEOUT))
            self._looks[key] = look
        objection = await asyncio.shield(look)
        if objection:
            raise ForkRefused(f"not forking {source} into {change.vm}: {objection}")


async def _look(plan: Plan, change: VMChange, backend: Backend, timeout: float) -> str:
    """Why the fork in ``change`` may not stop its source now ("": it may)."""
    assert change.desired is not None and change.desired.fork is not None
    fork = change.desired.fork
    source = _source_change(plan, change)
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
    if report is None:
        why = "; ".join(found) or "no agent state on the guest"
        return (
            f"the copy stops {fork.source}, and whether its agent is working could not be "
            f"read ({why}); {force}"
        )
    working = [s for s in report.sessions if s.state == "working"]
    if working:
        names = ", ".join(sorted({s.agent for s in working}))
        return (
            f"its agent is working ({names}) and the copy stops {fork.source}; fork it when "
            f"the agent is idle, or {force}"
        )
    return ""


def announce_forks(todo: list[VMChange], backends: Mapping[str, Backend]) -> None:
    """Tell each backend that copies forks together which forks this apply creates (a
    source stopped for the copy is then stopped once for all of its forks)."""
    for name, backend in backends.items():
        if isinstance(backend, CopiesForksTogether):
            backend.expect_forks(
                [
                    c.desired
                    for c in todo
                    if c.backend == name
                    and c.action is Action.CREATE
                    and c.claim is None
                    and c.desired is not None
                    and c.desired.fork is not None
                ]
            )
