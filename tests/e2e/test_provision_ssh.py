"""The guest transport against real sshd: identity, host-key policy, jump host,
and retrying a guest that is not up yet."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import asyncssh
import pytest

from sand.backends.protocol import JumpHost
from sand.errors import TransportError
from sand.provision.ssh import KnownHosts, connect
from tests.provision.e2e_helpers import endpoint

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def _whoami(conn: asyncssh.SSHClientConnection) -> str:
    return str((await conn.run("id -un; echo $SSH_CONNECTION", check=True)).stdout)


async def test_first_contact_pins_the_key_and_a_changed_key_is_refused(
    netns_guest: MakeGuest, state_dir
) -> None:
    a, b = netns_guest(), netns_guest()
    async with connect(endpoint(a, alias="lima:dev")) as conn:
        assert (await _whoami(conn)).startswith("claude\n")
    pinned = (state_dir / "known_hosts").read_text()
    key_type, key_b64 = a.host_public_key.split()[:2]
    assert pinned == f"lima:dev {key_type} {key_b64}\n"
    assert (state_dir / "known_hosts").stat().st_mode & 0o077 == 0

    # Same alias, pinned key: fine again.
    async with connect(endpoint(a, alias="lima:dev")) as conn:
        await _whoami(conn)

    # Same alias, another machine answering (with a key of its own): refused
    # during the key exchange, before any credential is offered, and not retried.
    start = time.monotonic()
    with pytest.raises(TransportError) as err:
        async with connect(endpoint(b, alias="lima:dev")):
            pass
    assert time.monotonic() - start < 5
    assert err.value.transient is False
    assert "differs from the one sand pinned for 'lima:dev'" in str(err.value)
    assert (state_dir / "known_hosts").read_text() == pinned


async def test_policy_none_checks_no_host_key_and_pins_nothing(
    netns_guest: MakeGuest, state_dir
) -> None:
    a, b = netns_guest(), netns_guest()
    KnownHosts().pin("pve:10.0.0.5", asyncssh.import_public_key(a.host_public_key))
    # A reused address now answers with b's key: with policy "none" that is expected.
    async with connect(endpoint(b, alias="pve:10.0.0.5", policy="none")) as conn:
        await _whoami(conn)
    assert "pve:10.0.0.5" in (state_dir / "known_hosts").read_text()
    assert len((state_dir / "known_hosts").read_text().splitlines()) == 1


async def test_only_the_endpoint_identity_is_offered(netns_guest: MakeGuest, tmp_path) -> None:
    a, b = netns_guest(), netns_guest()
    # a's key is not authorised on b; an agent or ~/.ssh key must not rescue it.
    with pytest.raises(TransportError) as err:
        async with connect(replace(endpoint(b), identity=str(a.client_key_path)), deadline=1):
            pass
    assert "permission denied" in str(err.value)
    missing = tmp_path / "no-such-key"
    with pytest.raises(TransportError, match="cannot load the SSH identity"):
        async with connect(replace(endpoint(b), identity=str(missing))):
            pass


async def test_a_guest_behind_a_jump_host(netns_guest: MakeGuest) -> None:
    jump, guest = netns_guest(user="hopper"), netns_guest()
    via = JumpHost(
        host=jump.address,
        port=jump.port,
        user=jump.user,
        identity=str(jump.client_key_path),
        known_hosts=str(jump.known_hosts_path),
    )
    async with connect(endpoint(guest, jump=via)) as conn:
        who = await _whoami(conn)
    user, ssh_connection = who.split("\n")[:2]
    assert user == "claude"
    assert ssh_connection.split()[0] == jump.address  # the guest saw the jump host connect

    # The jump host's key is pinned by its known_hosts file: a wrong one stops there.
    bad = jump.known_hosts_path.with_name("wrong_known_hosts")
    bad.write_text(f"{jump.address} {guest.host_public_key}\n")
    wrong = JumpHost(jump.address, jump.port, jump.user, str(jump.client_key_path), str(bad))
    with pytest.raises(TransportError, match="jump host"):
        async with connect(endpoint(guest, jump=wrong), deadline=2):
            pass


async def test_connecting_retries_until_a_booting_guest_answers(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    # A port that refuses connections for a while, then forwards to the guest's
    # sshd: what a VM whose sshd is still starting looks like.
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retries: list[str] = []

    async def open_later() -> asyncio.Server:
        await asyncio.sleep(1.0)

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_r, up_w = await asyncio.open_connection(guest.address, guest.port)

            async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                # A side closing abruptly (the test is over) ends the relay quietly.
                with contextlib.suppress(ConnectionError):
                    while data := await r.read(65536):
                        w.write(data)
                        await w.drain()
                w.close()

            await asyncio.gather(pump(reader, up_w), pump(up_r, writer))

        return await asyncio.start_server(relay, "127.0.0.1", port)

    opener = asyncio.create_task(open_later())
    target = replace(endpoint(guest), host="127.0.0.1", port=port)
    start = time.monotonic()
    async with connect(target, deadline=20, on_retry=lambda n, why: retries.append(why)) as conn:
        await _whoami(conn)
    elapsed = time.monotonic() - start
    server = await opener
    server.close()
    assert retries and all("ConnectionRefused" in r or "Errno 111" in r for r in retries)
    assert 1.0 <= elapsed < 5
    print(f"\nconnected after {len(retries)} refused attempts in {elapsed:.1f}s")


async def test_an_unreachable_guest_fails_within_the_deadline(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    start = time.monotonic()
    with pytest.raises(TransportError) as err:
        async with connect(replace(endpoint(guest), host="127.0.0.1", port=2), deadline=1.5):
            pass
    assert time.monotonic() - start < 4
    assert err.value.transient is True
    assert "failed after" in str(err.value)
