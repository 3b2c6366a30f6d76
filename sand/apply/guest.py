"""The bridge from the engine to provisioning: secret values and the provisioner.

Secret values are resolved on the host only for VMs that use them, once per
run, and live only in memory; what is kept is a keyed hash per VM so a
rotation is noticed without storing the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sand.backends.protocol import Backend, ObservedVM
from sand.desired import DesiredState, DesiredVM
from sand.plan.model import VMChange

if TYPE_CHECKING:
    from sand.apply.engine import Provisioner
    from sand.apply.session import Session


class GuestSecrets:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._values: dict[str, str] | None = None

    def _needed(self, desired: DesiredState) -> set[str]:
        names = {s.name for vm in desired.vms if vm.provision for s in vm.secrets}
        names |= {r.token_secret for vm in desired.vms for r in vm.repos if r.token_secret}
        return names

    def values(self, desired: DesiredState) -> dict[str, str]:
        if self._values is None:
            needed = self._needed(desired)
            if not needed:
                self._values = {}
            else:
                from sand.secrets import resolve_secrets

                resolved = resolve_secrets(
                    self.session.loaded.manifest, self.session.loaded.directory, needed
                )
                self._values = {name: value.reveal() for name, value in resolved.items()}
        return self._values

    def for_vm(self, vm: DesiredVM) -> dict[str, str]:
        values = self.values(self.session.desired)
        names = {s.name for s in vm.secrets} | {r.token_secret for r in vm.repos if r.token_secret}
        return {n: values[n] for n in names if n in values}

    def digests(self, desired: DesiredState) -> Mapping[str, tuple[str, str]]:
        """VM name → (keyed hash of its values now, keyed hash last delivered)."""
        users = [vm for vm in desired.vms if vm.provision and (vm.secrets or _tokens(vm))]
        if not users:
            return {}
        from sand.secrets import DigestStore, secrets_digest

        store = DigestStore(self.session.project)
        out: dict[str, tuple[str, str]] = {}
        for vm in users:
            out[vm.name] = (secrets_digest(vm, self.for_vm(vm)), store.get(vm.name) or "")
        return out

    def record(self, vm: DesiredVM) -> None:
        if not (vm.secrets or _tokens(vm)):
            return
        from sand.secrets import DigestStore, secrets_digest

        DigestStore(self.session.project).set(vm.name, secrets_digest(vm, self.for_vm(vm)))


def _tokens(vm: DesiredVM) -> bool:
    return any(r.token_secret for r in vm.repos)


def make_provisioner(session: Session, secrets: GuestSecrets) -> Provisioner:
    async def provision_vm(
        vm: DesiredVM, backend: Backend, current: ObservedVM, change: VMChange
    ) -> None:
        from sand.provision import deliver_secrets, provision

        endpoint = await backend.endpoint(vm, current)
        values = secrets.for_vm(vm)
        if change.secrets_only and not change.reprovision:
            await deliver_secrets(endpoint, vm, values)
        else:
            await provision(endpoint, vm, values)
        secrets.record(vm)

    return provision_vm
