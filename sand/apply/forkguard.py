"""The last look before a fork stops its source: is the source's agent at work?

Where a backend copies only a stopped VM (Lima: ``limactl clone``), forking stops the
source for the copy, which ends whatever its agent is doing. The plan shows such a fork
blocked while the source's agent works or waits for input (:mod:`sand.survey.forksource`);
just before the fork is made, the source's agents are read again the same way (one guest
exchange), as an agent may have started since, and the fork is refused for the same
reasons unless its entry says ``force: true``.

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
from sand.survey.forksource import objection, stops_source
from sand.survey.health import DEEP_TIMEOUT


class ForkRefused(SandError):
    """The fork would stop a source whose agent is at work (or cannot be asked)."""

    layer = ErrorLayer.GUARD


class SourceLooks:
    """One look per source for all of its forks in one apply: they are copied with one
    stop of it (the backend's batch), so they are refused or made together, and no look
    meets a source another fork has just stopped."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._looks: dict[tuple[str, str], asyncio.Future[str]] = {}

    async def refuse_while_working(self, change: VMChange, backend: Backend) -> None:
        """Raise :class:`ForkRefused` when ``change`` (a fork's create) would stop a
        source whose agent is working or waits for input, or cannot be read; nothing
        when it does not stop its source, is forced, or the source has no agent to ask."""
        if not stops_source(change):
            return
        assert change.desired is not None and change.desired.fork is not None
        source = change.desired.fork.source
        key = (change.backend, source)
        look = self._looks.get(key)
        if look is None:
            look = asyncio.ensure_future(objection(self._plan, change, backend, DEEP_TIMEOUT))
            self._looks[key] = look
        why = await asyncio.shield(look)
        if why:
            raise ForkRefused(f"not forking {source} into {change.vm}: {why}")


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
