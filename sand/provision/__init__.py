"""Guest provisioning: the bundle, the steps, and running them over :mod:`sand.guest`.

``bundle_digest`` is imported at plan time, so this package's import stays
stdlib-only; ``provision`` and ``deliver_secrets`` (which need asyncssh) are
loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sand.provision.bundle import bundle_digest

if TYPE_CHECKING:
    from sand.provision.memory import scrub_memory
    from sand.provision.provisioner import (
        ProvisionReport,
        deliver_secrets,
        provision,
        provision_base,
        secrets_present,
    )

__all__ = [
    "ProvisionReport",
    "bundle_digest",
    "deliver_secrets",
    "provision",
    "provision_base",
    "scrub_memory",
    "secrets_present",
]


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "bundle_digest":
        # here, not at the top: importing it loads asyncssh, pydantic, rich and yaml
        from sand.provision import memory, provisioner

        return getattr(memory if name == "scrub_memory" else provisioner, name)
    raise AttributeError(name)
