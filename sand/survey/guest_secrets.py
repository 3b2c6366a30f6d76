"""The secret values a plan compares, and the guests asked whether they still hold them.

Secret values are resolved on the host only for VMs that use them, once per
run, and live only in memory. What a delivery leaves behind is a *stamp* on
the VM itself (``sand.secrets.stamp``): any host holding the same values
computes the same one, so no host-side record is needed to notice a rotation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sand.backends.protocol import Backend
from sand.desired import DesiredState, DesiredVM
from sand.errors import SandError, SecretError
from sand.observed import Observation, SecretsRecord
from sand.plan.model import Action, GuestAction, Plan, VMChange
from sand.secrets import SecretValue, resolve_secrets, secret_names
from sand.secrets.resolve import values_for
from sand.secrets.stamp import Stamper

if TYPE_CHECKING:
    from sand.project import Session


# Guest checks run at plan time, one SSH session each: keep a big fleet's plan short
# without opening dozens of connections at once.
CHECK_PARALLELISM = 8


LOST_ON_GUEST = "secrets lost (no longer on the guest's tmpfs: rebooted?)"


class GuestSecrets:
    """Resolves (once) the secrets the desired VMs use, and computes their stamps.

    ``lenient`` (read-only views: ``sand status``, the board): a secret that cannot be
    read now (an unset variable, a missing file) does not stop the view; the VMs using
    it are shown without their secrets compared, and ``unreadable`` says why."""

    def __init__(self, session: Session, *, lenient: bool = False) -> None:
        self.session = session
        self.lenient = lenient
        self.unreadable: dict[str, str] = {}  # secret name -> why it cannot be read
        self._values: dict[str, SecretValue] | None = None
        self._stamper: Stamper | None = None

    def _resolved(self) -> dict[str, SecretValue]:
        if self._values is None:
            names = sorted(secret_names(self.session.desired.vms))
            loaded = self.session.loaded

            def read(wanted: list[str]) -> dict[str, SecretValue]:
                return resolve_secrets(
                    loaded.manifest,
                    loaded.directory,
                    wanted,
                    from_repository=loaded.from_repository,
                )

            if not self.lenient:
                self._values = read(names) if names else {}
                return self._values
            self._values = {}
            for name in names:
                try:
                    self._values |= read([name])
                except SecretError as exc:
                    self.unreadable[name] = str(exc)
        return self._values

    def not_compared(self, desired: DesiredState) -> list[str]:
        """Per VM whose secrets could not be read (lenient), why they were not compared."""
        self._resolved()
        out = []
        for vm in desired.vms:
            why = [self.unreadable[n] for n in sorted(secret_names([vm])) if n in self.unreadable]
            if why:
                out.append(f"{vm.name}: its secrets are not compared: {'; '.join(why)}")
        return out

    def for_vm(self, vm: DesiredVM) -> dict[str, str]:
        return values_for(vm, self._resolved())

    def stamp(self, vm: DesiredVM) -> str:
        """The stamp of ``vm``'s secret values now; "" when it is given none."""
        return self._stamp(vm, secret_names([vm]))

    def _stamp(self, vm: DesiredVM, names: set[str]) -> str:
        if not names or (self.lenient and names & self._resolved().keys() != names):
            return ""  # none, or (lenient) not all of them readable: not compared
        if self._stamper is None:
            self._stamper = Stamper(self.session.project)
        return self._stamper.stamp(vm, self.for_vm(vm))

    def stamps(self, desired: DesiredState) -> Mapping[str, str]:
        """VM name → the stamp of its values now, for the VMs that use secrets."""
        stamped = ((vm.name, self._stamp(vm, secret_names([vm]))) for vm in desired.vms)
        return {name: s for name, s in stamped if s}

    def delivered(self, vm: DesiredVM) -> SecretsRecord:
        return SecretsRecord(self.stamp(vm), int(time.time()))


def needs_guest_check(change: VMChange, observations: Mapping[str, Observation]) -> bool:
    """A running, otherwise no-op VM that uses secrets, on a backend blind to guest reboots."""
    vm, current, obs = change.desired, change.observed, observations.get(change.backend)
    return (
        change.action is Action.NOOP
        and change.guest is GuestAction.NONE
        and vm is not None
        and current is not None
        and obs is not None
        and not obs.reboots_visible
        and vm.provision
        and current.power == "running"
        and vm.delivers_secrets
    )


async def check_guests(
    plan: Plan, observations: Mapping[str, Observation], backends: Mapping[str, Backend]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(VM → why its secrets are gone, warnings) from one read-only check per guest.

    A guest that cannot be reached is a warning, not a change: sand does not
    plan a delivery it could not make, nor claim one is needed on a guess.
    """
    todo = [c for c in plan.changes if needs_guest_check(c, observations)]
    if not todo:
        return {}, ()
    from sand.provision import secrets_present  # asyncssh: only when a guest is asked

    gate = asyncio.Semaphore(CHECK_PARALLELISM)

    async def one(change: VMChange) -> tuple[str, bool | str]:
        assert change.desired is not None and change.observed is not None
        async with gate:
            try:
                backend = backends[change.backend]
                endpoint = await backend.endpoint(change.desired, change.observed)
                return change.vm, await secrets_present(endpoint, change.desired)
            except SandError as exc:
                return change.vm, str(exc)

    lost: dict[str, str] = {}
    warnings: list[str] = []
    for vm, outcome in await asyncio.gather(*(one(c) for c in todo)):
        if outcome is False:
            lost[vm] = LOST_ON_GUEST
        elif isinstance(outcome, str):
            warnings.append(
                f"VM {vm}: could not check that its secrets are still on the guest "
                f"(not re-delivered this run): {outcome}"
            )
    return lost, tuple(warnings)
