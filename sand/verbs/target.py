"""From a VM's name to its guest: manifest → backend → observe → endpoint → connection.

The CLI layer of every verb is this and nothing more; the verbs themselves
take an endpoint (or a runner), so tests can hand them a rig guest directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sand.defaults import GUEST_SSH_PATIENCE
from sand.desired import DesiredVM
from sand.errors import ErrorLayer, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.ssh import Connection
from sand.guest.ssh import connect as guest_connect
from sand.project import open_session
from sand.verbs.power import Note, PowerRefused, find_vm, wake_if_asleep


class VMNotReachable(SandError):
    layer = ErrorLayer.VERBS


@dataclass(frozen=True)
class Target:
    project: str
    vm: DesiredVM
    endpoint: GuestEndpoint


@contextlib.asynccontextmanager
async def resolve(manifest: str, name: str, note: Note | None = None) -> AsyncIterator[Target]:
    """The VM's guest, ready to use: a VM asleep is woken first (``note`` says so)."""
    session = open_session(manifest, lock=False)
    try:
        try:
            vm, current = await find_vm(session, manifest, name)
        except PowerRefused as exc:
            raise VMNotReachable(str(exc)) from None
        backend = session.backends[vm.backend]
        current = await wake_if_asleep(session, vm, current, note)
        if current.power != "running":
            raise VMNotReachable(f"VM {name} is {current.power}; it must be running")
        endpoint = await backend.endpoint(vm, current)
        yield Target(session.project, vm, endpoint)
    finally:
        await session.close()


@contextlib.asynccontextmanager
async def connect(endpoint: GuestEndpoint) -> AsyncIterator[Connection]:
    """The guest connection for a verb: sand's transport, with a person's deadline."""
    async with guest_connect(endpoint, deadline=GUEST_SSH_PATIENCE) as conn:
        yield conn
