"""A VM put to sleep with nothing secret in the memory a hibernation saves.

Before a hibernation the guest is scrubbed (``sand.provision.memory``: the delivered
secrets overwritten in place and removed); when it says its memory still holds what
sand cannot remove (a running process's secrets, an agent's login, freed pages not
zeroed) and the VM's ``idle:`` does not say ``keepMemory: true``, it is stopped
instead. A VM sand does not provision holds nothing sand delivered: it sleeps as
planned. The secrets come back when it wakes (the engine delivers them again).
"""

from __future__ import annotations

from sand.apply.events import Phase, Steps
from sand.backends.protocol import Backend
from sand.desired import DesiredVM
from sand.observed import ObservedVM
from sand.plan.idle import SUSPENDED, saved_or_stopped


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
