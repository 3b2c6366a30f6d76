"""From a VM's name to its guest: manifest → backend → observe → endpoint → connection.

The CLI layer of every verb is this and nothing more; the verbs themselves
take an endpoint (or a runner), so tests can hand them a rig guest directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sand.desired import DesiredVM
from sand.errors import BackendError, ErrorLayer, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.observed import Ownership
from sand.project import observe_all, open_session

if TYPE_CHECKING:
    from sand.guest.ssh import Connection

# A person is waiting, and a verb is only for a running VM: no boot to sit out.
CONNECT_DEADLINE = 30.0


class VMNotReachable(SandError):
    layer = ErrorLayer.VERBS


@dataclass(frozen=True)
class Target:
    project: str
    vm: DesiredVM
    endpoint: GuestEndpoint


@contextlib.asynccontextmanager
async def resolve(manifest: str, name: str) -> AsyncIterator[Target]:
    session = open_session(manifest, lock=False)
    try:
        vm = next((v for v in session.desired.vms if v.name == name), None)
        if vm is None:
            known = ", ".join(v.name for v in session.desired.vms) or "none"
            raise VMNotReachable(f"{manifest} declares no VM named {name!r} (VMs: {known})")
        backend = session.backends[vm.backend]
        obs = (await observe_all({vm.backend: backend}, session.desired))[vm.backend]
        if obs.unknown_reason:
            raise BackendError(obs.unknown_reason, backend=vm.backend)
        managed = [o for o in obs.vms if o.name == name and o.ownership is Ownership.MANAGED]
        if not managed:
            raise VMNotReachable(f"VM {name} does not exist yet on {vm.backend}: run sand apply")
        if len(managed) > 1:
            ids = ", ".join(o.identity for o in managed)
            raise VMNotReachable(f"several managed VMs on {vm.backend} are named {name}: {ids}")
        current = managed[0]
        if current.power != "running":
            raise VMNotReachable(f"VM {name} is {current.power}; it must be running")
        endpoint = await backend.endpoint(vm, current)
        yield Target(session.project, vm, endpoint)
    finally:
        await session.close()


@contextlib.asynccontextmanager
async def connect(endpoint: GuestEndpoint) -> AsyncIterator[Connection]:
    """The guest connection for a verb: sand's transport, with a person's deadline."""
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import connect as guest_connect

    async with guest_connect(endpoint, deadline=CONNECT_DEADLINE) as conn:
        yield conn
