"""Lima on a remote host: a real sshd on 127.0.0.1 whose user has the stand-in on PATH.

No mocks: asyncssh talks to /usr/sbin/sshd (fresh host and client keys per test), the
remote commands run through the login shell, and the stand-in logs what arrived.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.errors import TransportError
from sand.observed import Ownership
from sand.state.journal import Journal
from tests.backends.lima.conftest import desired, one
from tests.backends.lima.sshd_rig import Sshd, keygen


async def test_create_and_observe_over_one_ssh_connection(sshd: Sshd, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    state = desired("  - name: vm1\n  - name: vm2\n    ports: [{guest: 80, host: 8080}]\n")
    backend = sshd.backend()
    try:
        obs = await backend.observe(state.vms)
        assert obs.unknown_reason is None and obs.vms == ()
        for vm in state.vms:
            current = await backend.create(vm, journal)
            await backend.mark_converged(vm, current)
        obs = await backend.observe(state.vms)
    finally:
        await backend.close()
    assert sshd.connections() == 1  # one reconcile, one SSH connection
    assert {v.name: v.ownership for v in obs.vms} == {
        "vm1": Ownership.MANAGED,
        "vm2": Ownership.MANAGED,
    }
    assert {v.name: v.fingerprint for v in obs.vms} == {v.name: v.fingerprint for v in state.vms}
    invocations = sshd.standin.invocations()
    assert invocations, "the stand-in was never reached"
    assert all(i.lima_home == str(sshd.standin.lima_home) for i in invocations)
    assert all(i.tty_false for i in invocations)
    assert {"list", "create", "start"} <= {i.command for i in invocations}
    assert sorted(sshd.standin.instances())[-2:] == ["vm1", "vm2"]


async def test_noop_observe_is_one_exec_with_one_list(sshd: Sshd, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    vm = one()
    setup = sshd.local_backend()
    await setup.observe([vm])
    await setup.mark_converged(vm, await setup.create(vm, journal))
    sshd.standin.clear_log()
    connections, sessions = sshd.connections(), sshd.sessions()

    backend = sshd.backend()
    try:
        obs = await backend.observe([vm])
    finally:
        await backend.close()
    assert [v.fingerprint for v in obs.vms] == [vm.fingerprint]
    assert sshd.connections() == connections + 1
    assert sshd.sessions() == sessions + 1  # one round trip: list and markers together
    assert [c for c in sshd.standin.commands() if c] == ["list"]


async def test_endpoint_jumps_through_the_remote_host(sshd: Sshd, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    vm = one()
    setup = sshd.local_backend()
    await setup.observe([vm])
    await setup.create(vm, journal)
    backend = sshd.backend()
    try:
        (current,) = (await backend.observe([vm])).vms
        ep = await backend.endpoint(vm, current)
    finally:
        await backend.close()
    assert ep.host == "127.0.0.1" and ep.port == int(current.details["ssh_port"])
    assert ep.user == "claude" and ep.host_key_policy == "pin"
    assert ep.jump is not None
    assert (ep.jump.host, ep.jump.port, ep.jump.user) == ("127.0.0.1", sshd.port, "root")
    assert ep.jump.identity == str(sshd.client_key)
    assert ep.jump.known_hosts == str(sshd.known_hosts)
    # The guest trusts the remote host's Lima key: a local 0600 copy is what is offered.
    local = Path(ep.identity)
    remote_key = sshd.standin.lima_home / "_config" / "user"
    assert local.read_bytes() == remote_key.read_bytes()
    assert local.stat().st_mode & 0o077 == 0
    assert not str(local).startswith(str(sshd.standin.lima_home))


async def test_an_unknown_host_key_is_refused(sshd: Sshd) -> None:
    other = keygen(sshd.dir / "unrelated_host")
    pub = Path(f"{other}.pub").read_text().split()
    sshd.known_hosts.write_text(f"[otherhost]:22 {pub[0]} {pub[1]}\n")
    text = str(await refused(sshd))  # final, and nothing ran on the host
    assert f"127.0.0.1:{sshd.port}" in text and str(sshd.known_hosts) in text
    assert "not pinned" in text


async def test_a_changed_host_key_is_refused(sshd: Sshd) -> None:
    impostor = keygen(sshd.dir / "impostor_host")
    pub = Path(f"{impostor}.pub").read_text().split()
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    text = str(await refused(sshd))
    assert f"127.0.0.1:{sshd.port}" in text and str(sshd.known_hosts) in text
    assert "does not match" in text


async def test_a_missing_known_hosts_file_is_refused(sshd: Sshd) -> None:
    backend = sshd.backend(known_hosts=str(sshd.dir / "nope"))
    try:
        with pytest.raises(TransportError, match="does not exist"):
            await backend.observe([])
    finally:
        await backend.close()


@pytest.fixture
def agent(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An ssh-agent holding the *authorized* client key."""
    sock = str(sshd.dir / "agent.sock")
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while not os.path.exists(sock):
        assert time.monotonic() < deadline, "ssh-agent did not start"
        time.sleep(0.02)
    env = {**os.environ, "SSH_AUTH_SOCK": sock}
    subprocess.run(["ssh-add", "-q", str(sshd.client_key)], env=env, check=True)
    monkeypatch.setenv("SSH_AUTH_SOCK", sock)
    try:
        yield sock
    finally:
        proc.terminate()
        proc.wait(5)


async def test_identity_set_offers_only_that_key(sshd: Sshd, agent: str) -> None:
    # The agent holds a key the host accepts; with `identity` set it must not be used.
    backend = sshd.backend(identity=str(sshd.other_key))
    try:
        with pytest.raises(TransportError) as err:
            await backend.observe([])
    finally:
        await backend.close()
    assert "refused" in str(err.value) and str(sshd.other_key) in str(err.value)
    assert sshd.connections() == 0
    assert sshd.standin.invocations() == []


async def test_without_identity_the_agent_is_allowed(sshd: Sshd, agent: str) -> None:
    backend = sshd.backend(identity=None)
    try:
        obs = await backend.observe([])
    finally:
        await backend.close()
    assert obs.unknown_reason is None
    assert sshd.connections() == 1


async def test_a_failing_remote_listing_is_unknown(sshd: Sshd, tmp_path: Path) -> None:
    sshd.standin.fail("list", "host agent socket timed out")
    backend = sshd.backend()
    try:
        obs = await backend.observe([one()])
    finally:
        await backend.close()
    assert obs.unknown_reason is not None
    assert "host agent socket timed out" in obs.unknown_reason
    assert f"root@127.0.0.1:{sshd.port}" in obs.unknown_reason


def host_public(sshd: Sshd) -> tuple[str, str]:
    """The sshd's own host key, as a known_hosts line wants it (type, base64)."""
    kind, blob = Path(f"{sshd.host_key}.pub").read_text().split()[:2]
    return kind, blob


async def refused(sshd: Sshd) -> TransportError:
    backend = sshd.backend()
    try:
        with pytest.raises(TransportError) as err:
            await backend.observe([])
    finally:
        await backend.close()
    assert err.value.transient is False
    assert sshd.standin.invocations() == []
    return err.value


async def test_an_entry_without_a_port_does_not_pin_another_port(sshd: Sshd) -> None:
    # The right key, pinned as OpenSSH pins port 22: it says nothing of this sshd's port.
    kind, blob = host_public(sshd)
    sshd.known_hosts.write_text(f"127.0.0.1 {kind} {blob}\n")
    text = str(await refused(sshd))
    assert "not pinned" in text and f"'[127.0.0.1]:{sshd.port}'" in text
    assert "counts for port 22 only" in text


async def test_a_revoked_host_key_is_said_to_be_revoked(sshd: Sshd) -> None:
    kind, blob = host_public(sshd)
    sshd.known_hosts.write_text(
        f"@revoked [127.0.0.1]:{sshd.port} {kind} {blob}\n[127.0.0.1]:{sshd.port} {kind} {blob}\n"
    )
    text = str(await refused(sshd))
    assert "marked @revoked" in text and str(sshd.known_hosts) in text


async def test_a_hashed_entry_for_the_port_is_trusted(sshd: Sshd) -> None:
    kind, blob = host_public(sshd)
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(sshd.known_hosts)], check=True)
    assert sshd.known_hosts.read_text().startswith("|1|")
    backend = sshd.backend()
    try:
        seen = await backend.observe([])
    finally:
        await backend.close()
    assert seen.unknown_reason is None


async def test_the_jump_to_a_guest_reads_known_hosts_by_the_same_rules(sshd: Sshd) -> None:
    from sand.guest.endpoint import GuestEndpoint, JumpHost
    from sand.guest.ssh import connect

    kind, blob = host_public(sshd)
    sshd.known_hosts.write_text(f"127.0.0.1 {kind} {blob}\n")
    jump = JumpHost("127.0.0.1", sshd.port, "root", str(sshd.client_key), str(sshd.known_hosts))
    guest = GuestEndpoint("10.0.0.9", 22, "claude", str(sshd.client_key), jump=jump)
    with pytest.raises(TransportError) as err:
        async with connect(guest, deadline=2.0):
            pass
    assert "jump host" in str(err.value) and "counts for port 22 only" in str(err.value)
    assert sshd.sessions() == 0
