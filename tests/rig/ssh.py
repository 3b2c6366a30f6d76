"""asyncssh helpers for talking to rig guests the way sand does: the rig's
key only (no agent, no ~/.ssh/config) and the guest's host key pinned."""

from __future__ import annotations

import os
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
