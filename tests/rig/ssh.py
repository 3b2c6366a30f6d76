"""asyncssh helpers for talking to rig guests the way sand does: the rig's
key only (no agent, no ~/.ssh/config) and the guest's host key pinned."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import asyncssh


class SSHTarget(Protocol):
    """What NetnsGuest and QemuGuest both expose."""

    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def client_key_path(self) -> Path: ...
    @property
    def host_public_key(self) -> str: ...


def connect_options(
    guest: SSHTarget,
    *,
    user: str | None = None,
    key_path: Path | None = None,
    host_public_key: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``asyncssh.connect``; override a part to prove
    that a wrong key or an unexpected host key is refused."""
    host_key = asyncssh.import_public_key(host_public_key or guest.host_public_key)
    return {
        "host": guest.address,
        "port": guest.port,
        "username": user or guest.user,
        "client_keys": [os.fspath(key_path or guest.client_key_path)],
        # (trusted host keys, trusted CA keys, revoked keys): only this key.
        "known_hosts": ([host_key], [], []),
        "agent_path": None,
        "config": None,
        "password": None,
        "kbdint_auth": False,
        "connect_timeout": 30,
    }


async def run(
    guest: SSHTarget,
    command: str,
    *,
    input: str | None = None,
    check: bool = True,
    user: str | None = None,
) -> asyncssh.SSHCompletedProcess:
    """One command over a fresh connection (tests favour clarity over reuse)."""
    async with asyncssh.connect(**connect_options(guest, user=user)) as conn:
        return await conn.run(command, input=input, check=check)


@contextlib.contextmanager
def ssh_agent(socket_path: Path, *keys: Path) -> Iterator[str]:
    """A real ``ssh-agent`` holding ``keys`` (private key paths); yields its socket, for
    SSH_AUTH_SOCK. Tests of "only the configured key is offered" need an agent that
    holds a key the guest accepts, or they prove nothing."""
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not socket_path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ssh-agent did not start")
            time.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        for key in keys:
            subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True)
        listed = subprocess.run(["ssh-add", "-L"], env=env, capture_output=True, text=True)
        assert len(listed.stdout.splitlines()) == len(keys), listed
        yield str(socket_path)
    finally:
        proc.terminate()
        proc.wait(5)
