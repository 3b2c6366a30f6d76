"""sand shell against a real guest: the system ssh with sand's argv (pinned,
policy none, through a jump host), and one command over sand's transport."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.endpoint import JumpHost
from sand.guest.ssh import KnownHosts, host_key_alias
from sand.guest.stream import run_streaming
from sand.verbs.shell import jump_config, ssh_argv
from sand.verbs.target import connect
from tests.rig.ssh import ssh_agent
from tests.verbs.rig_helpers import rig_endpoint

if TYPE_CHECKING:
    from sand.guest.endpoint import GuestEndpoint
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # A space in the path: macOS puts sand's state under "Application Support".
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state dir"))
    return tmp_path / "state dir"


def ssh(
    endpoint: GuestEndpoint,
    *command: str,
    config: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = ssh_argv(
        endpoint, known_hosts=KnownHosts().path, alias=host_key_alias(endpoint), config=config
    )
    return subprocess.run(
        [*argv, *command], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env=env or {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")},
    )  # fmt: skip


def test_only_the_endpoints_key_is_offered_not_the_agents(
    netns_guest: MakeGuest, tmp_path: Path
) -> None:
    a, b = netns_guest(), netns_guest()
    # The agent and ~/.ssh/id_ed25519 hold b's authorised key; the endpoint names a's.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_bytes(b.client_key_path.read_bytes())
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    wrong = replace(rig_endpoint(b), identity=str(a.client_key_path))
    with ssh_agent(tmp_path / "agent.sock", b.client_key_path) as sock:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "SSH_AUTH_SOCK": sock}
        # The rescue is there: the same ssh without sand's options gets in by the agent.
        plain = subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(a.client_key_path), "-p", str(b.port),
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", f"{b.user}@{b.address}", "id", "-un"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        assert (plain.returncode, plain.stdout) == (0, f"{b.user}\n"), plain.stderr
        res = ssh(wrong, "id", "-un", env=env)
    assert res.returncode == 255 and "Permission denied" in res.stderr, res.stderr


def test_the_ssh_argv_reaches_the_guest_and_pins_hold(netns_guest: MakeGuest) -> None:
    a, b = netns_guest(), netns_guest()
    endpoint = rig_endpoint(a)
    res = ssh(endpoint, "id", "-un")
    assert (res.returncode, res.stdout) == (0, "claude\n"), res.stderr
    # b answering under a's pinned alias: the ssh client refuses, as sand's transport does.
    impostor = replace(rig_endpoint(b), host_key_alias=endpoint.host_key_alias)
    res = ssh(impostor, "true")
    assert res.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in res.stderr.upper()
    # Policy none (Proxmox): no known_hosts at all.
    res = ssh(rig_endpoint(b, policy="none"), "id", "-un")
    assert (res.returncode, res.stdout) == (0, "claude\n"), res.stderr


def test_through_a_jump_host(netns_guest: MakeGuest, tmp_path: Path) -> None:
    jump_guest, target = netns_guest(), netns_guest()
    known = tmp_path / "jump_known_hosts"
    known.write_text(f"{jump_guest.address} {jump_guest.host_public_key}\n")
    jump = JumpHost(
        host=jump_guest.address, port=22, user=jump_guest.user,
        identity=str(jump_guest.client_key_path), known_hosts=str(known),
    )  # fmt: skip
    endpoint = rig_endpoint(target, jump=jump)
    config = tmp_path / "ssh_config"
    config.write_text(jump_config(jump))
    res = ssh(endpoint, "sh", "-c", "'echo $SSH_CONNECTION'", config=config)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == jump_guest.address  # the guest saw the jump host connect


async def test_one_command_keeps_its_argv_output_and_exit_status(
    netns_guest: MakeGuest, capfd: pytest.CaptureFixture[str]
) -> None:
    guest = netns_guest()
    read, write = os.pipe()
    os.write(write, b"from stdin\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        async with connect(rig_endpoint(guest)) as conn:
            status = await run_streaming(
                conn, ["sh", "-c", 'printf "%s|" "$@"; cat; echo err >&2; exit 3', "sh",
                       "a b", "$HOME", ";id", "`id`"],
            )  # fmt: skip
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    out, err = capfd.readouterr()
    assert status == 3
    assert out == "a b|$HOME|;id|`id`|from stdin\n"
    assert err == "err\n"


@pytest.mark.parametrize("stdin", ["/dev/null", "closed"])
async def test_one_command_from_cron_with_no_stdin(
    stdin: str,
    netns_guest: MakeGuest,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sand shell VM -- CMD < /dev/null` (cron, systemd, CI) or with stdin closed: the
    command gets EOF at once, and nothing but its own output is printed."""
    import asyncio
    import sys

    guest = netns_guest()
    saved = os.dup(0)
    if stdin == "closed":
        # As Python starts with fd 0 closed: no sys.stdin, and the next file opened
        # (here the SSH socket) may take fd 0.
        monkeypatch.setattr(sys, "stdin", None)
        os.close(0)
    else:
        null = os.open(stdin, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    try:
        async with connect(rig_endpoint(guest)) as conn:
            status = await asyncio.wait_for(
                run_streaming(conn, ["sh", "-c", "cat; echo read-to-the-end"]), 60
            )
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    out, err = capfd.readouterr()
    assert status == 0, err
    assert out == "read-to-the-end\n"
    assert err == ""
