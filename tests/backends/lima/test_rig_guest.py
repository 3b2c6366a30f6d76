"""A stand-in instance backed by a real guest (the rig's NetnsGuest): the endpoint the
backend hands out is one sand's provisioner can actually log in to, locally and through
the remote Lima host as a jump host."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.backends.lima import LimaBackend
from sand.guest.ssh import KnownHosts, connect
from sand.state.journal import Journal
from tests.backends.lima.conftest import one
from tests.backends.lima.sshd_rig import Sshd
from tests.limactl_standin import StandIn

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e


async def test_endpoint_reaches_the_guest(
    standin: StandIn,
    backend: LimaBackend,
    journal: Journal,
    netns_guest: MakeGuest,
    tmp_path: Path,
) -> None:
    guest = netns_guest()
    standin.back_with_guest("vm1", guest)
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    ep = await backend.endpoint(vm, current)
    assert (ep.host, ep.port, ep.user) == (guest.address, guest.port, guest.user)
    pins = KnownHosts(tmp_path / "known_hosts")
    async with connect(ep, known_hosts=pins, deadline=30) as conn:
        result = await conn.run("id -un", check=True)
    assert str(result.stdout).strip() == guest.user
    # Pinned under the per-creation alias: a re-created vm1 gets a fresh pin.
    assert pins.keys(ep.host_key_alias)
    assert ep.host_key_alias.startswith("lima-vm1.")


async def test_endpoint_through_the_remote_host(
    sshd: Sshd, netns_guest: MakeGuest, tmp_path: Path
) -> None:
    guest = netns_guest()
    sshd.standin.back_with_guest("vm1", guest)
    journal = Journal(tmp_path / "journal.jsonl")
    vm = one()
    backend = sshd.backend()
    try:
        await backend.observe([vm])
        current = await backend.create(vm, journal)
        ep = await backend.endpoint(vm, current)
    finally:
        await backend.close()
    assert ep.jump is not None and ep.jump.port == sshd.port
    # The key the guest trusts lives on the remote host; sand offers a local copy of it.
    assert Path(ep.identity).read_bytes() == guest.client_key_path.read_bytes()
    async with connect(ep, known_hosts=KnownHosts(tmp_path / "known_hosts"), deadline=30) as c:
        result = await c.run("hostname", check=True)
    assert str(result.stdout).strip()
