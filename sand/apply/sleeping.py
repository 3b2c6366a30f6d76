"""A VM's memory saved with nothing secret it can be rid of: a hibernation, and the
snapshot a ``snapshot: memory`` fork is cloned from.

Before a hibernation the guest is scrubbed (``sand.provision.memory``: the delivered
secrets overwritten in place and removed); when it says its memory still holds what
sand cannot remove (a running process's secrets, an agent's login, freed pages not
zeroed) and the VM's ``idle:`` does not say ``keepMemory: true``, it is stopped
instead. A VM sand does not provision holds nothing sand delivered: it sleeps as
planned. The secrets come back when it wakes (the engine delivers them again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

from sand.apply.events import Phase, Steps
from sand.apply.replace import ReplaceKit
from sand.backends.protocol import Backend
from sand.desired import DesiredVM
from sand.observed import SUSPENDED, ObservedVM
from sand.plan.idle import saved_or_stopped
from sand.plan.model import Action, GuestAction, Plan, VMChange
from sand.plan.saved import delivered


async def how_to_sleep(
    vm: DesiredVM, backend: Backend, current: ObservedVM, how: str, say: Steps
) -> str:
    """``how`` the plan said, or ``stopped`` when a hibernation would save a secret."""
    if how != SUSPENDED or not vm.provision:
        return how
    # here, not at the top: sand apply starts without asyncssh (sand.provision's rule)
    from sand.provision import scrub_memory

    say(Phase.UPDATING, "removing the delivered secrets before its memory is saved")
    endpoint = await backend.endpoint(vm, current)
    scrubbed = await scrub_memory(endpoint, vm)
    chosen = saved_or_stopped(how, scrubbed.left, vm.idle)
    if chosen != how:
        say(Phase.UPDATING, "stopped, not hibernated: its memory holds " + ", ".join(scrubbed.left))
    return chosen


class MemoryForkSources:
    """A ``snapshot: memory`` fork saves its source's RAM in the snapshot it is cloned
    from: the source is scrubbed first (its delivered secrets removed) and given its
    secrets again once the fork is made. The forks of one source take turns, so no
    snapshot meets a source another fork has just given its secrets back."""

    def __init__(self, plan: Plan, kit: ReplaceKit) -> None:
        self._plan = plan
        self._kit = kit
        self._turns: dict[tuple[str, str], asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def scrubbed(
        self, change: VMChange, backend: Backend, say: Steps
    ) -> AsyncIterator[VMChange]:
        """``change`` to carry out once its source is scrubbed: a memory fork of a source
        whose memory still holds what sand cannot remove is made from a disk snapshot
        (qemu-server's clone never copies a snapshot's RAM: the fork loses nothing)."""
        source = self._source(change)
        if source is None:
            yield change
            return
        vm, current = source.desired, source.observed
        assert vm is not None and current is not None and change.desired is not None
        async with self._turns.setdefault((change.backend, vm.name), asyncio.Lock()):
            from sand.provision import scrub_memory  # see how_to_sleep

            say(Phase.CREATING, f"removing {vm.name}'s delivered secrets before its RAM is saved")
            left = (await scrub_memory(await backend.endpoint(vm, current), vm)).left
            if left:
                say(Phase.CREATING, f"snapshot without memory: {vm.name}'s holds {', '.join(left)}")
                fork = replace(change.desired.fork, memory=False) if change.desired.fork else None
                change = replace(change, desired=replace(change.desired, fork=fork))
            try:
                yield change
            finally:
                say(Phase.DELIVERING_SECRETS, f"to {vm.name} again")
                again = replace(source, guest=GuestAction.SECRETS)
                await self._kit.provisioner(vm, backend, current, again)

    def _source(self, change: VMChange) -> VMChange | None:
        """The source's change when ``change`` makes a memory fork of a running,
        provisioned VM that holds delivered secrets; None otherwise."""
        fork = change.desired.fork if change.desired is not None else None
        if change.action is not Action.CREATE or fork is None or not fork.memory:
            return None
        for c in self._plan.changes:
            vm, current = c.desired, c.observed
            if c.vm != fork.source or c.backend != change.backend or vm is None:
                continue
            if current is not None and current.power == "running" and vm.provision:
                return c if delivered(vm) else None
        return None
