"""A fork's running source, stopped for the copy and started again, gets its secrets back.

Where a backend copies only a stopped VM (Lima: ``limactl clone``), the source is
stopped for the copy and started again after it; the stop empties the guest's tmpfs,
and with it the secrets sand delivered there. An apply that said "Apply complete!"
then left the source without its tokens until some later apply noticed the boot. So
once the last fork of a running source in this apply is done (all of them: their copies
share the stop, and a fork's create ends only once its source is back), the source's
secrets are delivered again through the same delivery provisioning uses, and the
delivery is recorded on the source as any delivery is. A delivery that fails fails the
fork that ran it, naming the source: the apply does not claim completion, and the next
plan shows the source's secrets lost (it sees the boot after the last delivery).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from sand.apply.events import Phase, Steps
from sand.backends.protocol import Backend
from sand.desired import DesiredVM
from sand.errors import BackendError, ErrorLayer, SandError
from sand.observed import ObservedVM, Ownership, SecretsRecord
from sand.plan.model import Action, GuestAction, Plan, VMChange

Deliver = Callable[[DesiredVM, Backend, ObservedVM, VMChange], Awaitable[SecretsRecord | None]]


class SourceSecretsLost(SandError):
    """A fork's source, restarted for the copy, could not be given its secrets again."""

    layer = ErrorLayer.PROVISION


def _restarted_source(plan: Plan, change: VMChange) -> VMChange | None:
    """The source's own change when ``change`` is a fork that stops (and starts again) a
    running source whose guest holds secrets; else None."""
    fork = change.desired.fork if change.desired is not None else None
    if change.action is not Action.CREATE or change.claim is not None or fork is None:
        return None
    if not fork.stops_source:
        return None
    source = plan.change_for(change.backend, fork.source)
    if source is None or source.desired is None or source.observed is None:
        return None
    if source.observed.power != "running" or not source.desired.provision:
        return None
    return source if source.desired.delivers_secrets else None


class SourceSecrets:
    """Counts down the forks of each running source in one apply; the last one done
    delivers the source's secrets again when any of them reached the copy."""

    def __init__(self, plan: Plan, todo: list[VMChange]) -> None:
        self._plan = plan
        self._left: dict[tuple[str, str], int] = {}
        self._copied: set[tuple[str, str]] = set()
        for change in todo:
            if (source := _restarted_source(plan, change)) is not None:
                key = (source.backend, source.vm)
                self._left[key] = self._left.get(key, 0) + 1

    def source_of(self, change: VMChange) -> VMChange | None:
        """The source ``change`` (a fork) restarts, when its secrets must follow."""
        source = _restarted_source(self._plan, change)
        if source is None or (source.backend, source.vm) not in self._left:
            return None
        return source

    def fork_done(self, change: VMChange, *, copied: bool) -> VMChange | None:
        """Count ``change`` done (``copied``: it reached the backend's copy, so the source
        may have been stopped); the source to deliver to now when it was the last."""
        source = self.source_of(change)
        if source is None:
            return None
        key = (source.backend, source.vm)
        if copied:
            self._copied.add(key)
        self._left[key] -= 1
        return source if self._left[key] == 0 and key in self._copied else None


async def deliver_again(source: VMChange, backend: Backend, deliver: Deliver, say: Steps) -> None:
    """Deliver ``source``'s secrets to its guest as it runs now (observed again: the
    restart gave it a new boot, hence new host keys and maybe a new port) and record the
    delivery on it; raises :class:`SourceSecretsLost` naming the source."""
    assert source.desired is not None
    vm = source.desired
    say(Phase.DELIVERING_SECRETS, f"to {vm.name} again (the copy restarted it)")
    try:
        seen = await backend.observe([vm])
        found = [o for o in seen.named(vm.name) if o.ownership is Ownership.MANAGED]
        if len(found) != 1 or found[0].power != "running":
            raise BackendError(f"{vm.name} is not one running VM of {source.backend} now")
        current = found[0]
        delivered = await deliver(vm, backend, current, replace(source, guest=GuestAction.SECRETS))
        if source.action is Action.NOOP and source.guest in (GuestAction.NONE, GuestAction.SECRETS):
            # Its marker is converged already: only the delivery it records changes, so
            # the next plan does not take the restart for a lost delivery.
            await backend.mark_converged(vm, current, delivered)
    except SandError as exc:
        raise SourceSecretsLost(
            f"the copy stopped and restarted {vm.name}, which emptied its tmpfs, and its "
            f"secrets could not be delivered again: {exc} (the next sand apply delivers them)"
        ) from exc
