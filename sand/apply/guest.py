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
    from sand.secrets import SecretValue


class GuestSecrets:
    """Resolves (once) the secrets the desired VMs use, and tracks their digests."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._values: dict[str, SecretValue] | None = None

    def _resolved(self) -> dict[str, SecretValue]:
        if self._values is None:
            from sand.secrets import resolve_secrets, secret_names

            names = secret_names(self.session.desired.vms)
            loaded = self.session.loaded
            self._values = (
                resolve_secrets(loaded.manifest, loaded.directory, names) if names else {}
            )
        return self._values

    def for_vm(self, vm: DesiredVM) -> dict[str, str]:
        from sand.secrets.resolve import values_for

        return values_for(vm, self._resolved())

    def digests(self, desired: DesiredState) -> Mapping[str, tuple[str, str]]:
        """VM name → (keyed hash of its values now, keyed hash last delivered)."""
        from sand.secrets import DigestStore, digest_key, secret_names, secrets_digest

        users = [vm for vm in desired.vms if secret_names([vm])]
        if not users:
            return {}
        key, store = digest_key(), DigestStore(self.session.project)
        return {
            vm.name: (secrets_digest(vm, self.for_vm(vm), key), store.get(vm.name) or "")
            for vm in users
        }

    def record(self, vm: DesiredVM) -> None:
        from sand.secrets import DigestStore, digest_key, secret_names, secrets_digest

        store = DigestStore(self.session.project)
        if secret_names([vm]):
            store.record(vm.name, secrets_digest(vm, self.for_vm(vm), digest_key()))
        else:
            store.forget(vm.name)


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
