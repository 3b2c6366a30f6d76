"""The guest transport against real sshd: identity, host-key policy, jump host,
and retrying a guest that is not up yet."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh
import pytest

from sand.activity import Activity, listening
from sand.errors import TransportError
from sand.guest.endpoint import JumpHost
from sand.guest.ssh import KnownHosts, connect
from tests.provision.e2e_helpers import endpoint
from tests.rig.ssh import ssh_agent

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest
    from tests.rig.guest import NetnsGuest


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


async def test_only_the_endpoint_identity_is_offered(
    netns_guest: MakeGuest, tmp_path, monkeypatch
) -> None:
    a, b = netns_guest(), netns_guest()
    # a's key is not authorised on b. An agent and a ~/.ssh default key both hold b's
    # authorised key, so any key but the endpoint's would get in.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    default_key = home / ".ssh" / "id_ed25519"
    default_key.write_bytes(b.client_key_path.read_bytes())
    default_key.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    with ssh_agent(tmp_path / "agent.sock", b.client_key_path) as sock:
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        # The rescue is there: a client left to its defaults (agent, ~/.ssh) gets in.
        pinned = ([asyncssh.import_public_key(b.host_public_key)], [], [])
        async with asyncssh.connect(
            b.address, port=b.port, username=b.user, known_hosts=pinned, config=None
        ) as conn:
            assert (await _whoami(conn)).startswith(f"{b.user}\n")
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
        # sshd comes up once sand has been refused twice, however long that took.
        while len(retries) < 2:
            await asyncio.sleep(0.01)

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

    def heard(said: Activity) -> None:
        if said.retry is not None:
            retries.append(said.retry.reason)

    with listening(heard):
        async with connect(target, deadline=20) as conn:
            await _whoami(conn)
    elapsed = time.monotonic() - start
    server = await opener
    server.close()
    assert len(retries) >= 2
    assert all("ConnectionRefused" in r or "Errno 111" in r for r in retries)
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


def _second_sshd(guest: NetnsGuest, port: int) -> str:
    """Another sshd in ``guest`` on ``port`` with a host key of its own; its public key."""
    key = "/etc/ssh/alt_host_ed25519_key"
    guest.run_root(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    config = (
        f"Port {port}\nHostKey {key}\nPidFile /run/sshd-alt.pid\nUsePAM no\nUseDNS no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
    )
    alt = "/etc/ssh/sshd_alt_config"
    guest.run_root(["sh", "-c", f"cat > {alt}"], input=config.encode(), check=True)
    guest.run_root(["/usr/sbin/sshd", "-f", alt], check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((guest.address, port), 2) as s:
            if s.recv(64).startswith(b"SSH-"):
                return guest.run_root(["cat", key + ".pub"], check=True).stdout.decode().strip()
        time.sleep(0.05)
    raise AssertionError(f"the second sshd on port {port} did not answer")


async def test_a_pinned_key_is_bound_to_its_port(netns_guest: MakeGuest, state_dir) -> None:
    """Two sshds on one address: a key pinned for one port is never the other's."""
    guest = netns_guest()
    alt_key = _second_sshd(guest, 2222)
    known = state_dir / "known_hosts"
    at_22 = endpoint(guest, alias="")
    at_2222 = replace(at_22, port=2222)

    async with connect(at_2222) as conn:
        assert (await _whoami(conn)).startswith("claude\n")
    alt_type, alt_b64 = alt_key.split()[:2]
    assert known.read_text() == f"[{guest.address}]:2222 {alt_type} {alt_b64}\n"

    # Port 22 answers with another key. Were pins keyed by address alone, the
    # 2222 pin would refuse it as an impostor; bound to its port, 22 is a first
    # contact and gets a pin of its own, in OpenSSH's bare form for port 22.
    async with connect(at_22) as conn:
        await _whoami(conn)
    main_type, main_b64 = guest.host_public_key.split()[:2]
    assert sorted(known.read_text().splitlines()) == sorted(
        [f"{guest.address} {main_type} {main_b64}", f"[{guest.address}]:2222 {alt_type} {alt_b64}"]
    )

    # The file is OpenSSH's own format: the real ssh client, strict, reading only
    # it, accepts each sshd on its own port (no HostKeyAlias: ssh names them itself).
    def ssh(port: int, kh: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(guest.client_key_path), "-o", "IdentitiesOnly=yes",
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={kh}", "-o", "GlobalKnownHostsFile=/dev/null",
             "-p", str(port), "-l", guest.user, guest.address, "true"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip

    assert ssh(22, known).returncode == 0
    assert ssh(2222, known).returncode == 0

    # An old entry without a port counts for port 22 only: holding 2222's key,
    # it makes port 22 (another key) an impostor, and is not used for 2222.
    known.write_text(f"{guest.address} {alt_type} {alt_b64}\n")
    with pytest.raises(TransportError, match="differs from the one sand pinned"):
        async with connect(at_22, deadline=2):
            pass
    async with connect(at_2222) as conn:  # first contact on 2222: pinned under its port
        await _whoami(conn)
    assert f"[{guest.address}]:2222 {alt_type} {alt_b64}" in known.read_text().splitlines()
    assert ssh(22, known).returncode != 0  # OpenSSH agrees: that key is not port 22's
