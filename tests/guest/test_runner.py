"""sand's one guest runner against a real sshd guest (netns rig): every mode its
callers use -- a fixed script with bounded output (the verbs, the sweep), a
merged-stderr command (provisioning steps), host files streamed in and out
(``preserve:``) -- and how each way of ending is reported."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.errors import TransportError
from sand.guest.runner import STDERR_TAIL, GuestTimeout, OutputTooLarge, SshRunner
from sand.guest.ssh import connect
from tests.provision.e2e_helpers import endpoint

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_a_script_reads_stdin_and_reports_its_end(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with connect(endpoint(guest), deadline=30) as conn:
        runner = SshRunner(conn, "probe")
        ok = await runner.run('read -r -d "" x; printf "%s|%s" "$HOME" "$x"', stdin=b"hi\0")
        assert (ok.exit_status, ok.stdout, ok.exit_signal) == (0, b"/home/claude|hi", "")

        # A non-zero exit is a result; stderr comes back as its tail, not whole.
        noisy = await runner.run(f"head -c {3 * STDERR_TAIL} /dev/zero | tr '\\0' e >&2; exit 7")
        assert (noisy.exit_status, noisy.stdout) == (7, b"")
        assert noisy.stderr == b"e" * STDERR_TAIL

        # A script that exits without reading its stdin is not a transport failure.
        early = await runner.run("exit 3", stdin=os.urandom(4 << 20))
        assert early.exit_status == 3

        killed = await runner.run("kill -KILL $$")
        assert (killed.exit_status, killed.exit_signal) == (-1, "KILL")


async def test_output_past_the_limit_is_refused_not_buffered(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with connect(endpoint(guest), deadline=30) as conn:
        runner = SshRunner(conn, "flood")
        with pytest.raises(OutputTooLarge) as info:
            await runner.run("head -c 2000000 /dev/zero", limit=1 << 20)
        assert info.value.step == "flood"
        assert "exceeded 1048576 bytes" in str(info.value)
        # The connection is still good for the next command.
        assert (await runner.run("echo ok")).stdout == b"ok\n"


async def test_a_timeout_keeps_what_was_read_out_of_its_message(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with connect(endpoint(guest), deadline=30) as conn:
        runner = SshRunner(conn, "slow")
        with pytest.raises(GuestTimeout) as info:
            await runner.run_command(
                "echo before-the-clock; sleep 30", timeout=1.5, merge_stderr=True
            )
    assert info.value.output == b"before-the-clock\n"
    assert info.value.step == "slow"
    assert "timed out after 1.5s" in str(info.value)
    assert "before-the-clock" not in str(info.value)  # a caller decides what to show


async def test_merged_stderr_arrives_in_order_in_stdout(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with connect(endpoint(guest), deadline=30) as conn:
        result = await SshRunner(conn).run_command(
            "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; exit 4", merge_stderr=True
        )
    assert result.exit_status == 4
    assert result.stdout == b"one\ntwo\nthree\n"
    assert result.stderr == b""


async def test_host_files_stream_in_and_out_unbounded(
    netns_guest: MakeGuest, tmp_path: Path
) -> None:
    guest = netns_guest()
    source = tmp_path / "in.bin"
    source.write_bytes(os.urandom(3 << 20))
    copy = tmp_path / "out.bin"
    async with connect(endpoint(guest), deadline=30) as conn:
        runner = SshRunner(conn, "stream")
        with source.open("rb") as data:
            sent = await runner.run_command("cat > copy.bin", stdin=data, timeout=None)
        assert sent.exit_status == 0
        with copy.open("wb") as out:
            # A limit applies to memory only: a host file takes all of it.
            back = await runner.run_command("cat copy.bin", stdout=out, limit=1024)
    assert (back.exit_status, back.stdout) == (0, b"")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
    in_guest = guest.run_root(["sha256sum", "/home/claude/copy.bin"], check=True)
    assert in_guest.stdout.split()[0].decode() == digest


async def test_a_closed_connection_is_a_transport_error(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with connect(endpoint(guest), deadline=30) as conn:
        runner = SshRunner(conn, "probe", where="claude@rig")
        conn.close()
        await conn.wait_closed()
        with pytest.raises(TransportError) as info:
            await runner.run("echo never")
    assert "SSH to claude@rig failed during step 'probe'" in str(info.value)
