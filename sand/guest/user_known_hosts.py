"""A person's own known_hosts (``~/.ssh/known_hosts`` or the manifest's file), read with
OpenSSH's rules for every SSH hop sand makes to a host the person named: the remote
Lima host, and the jump host on the way to its guests.

asyncssh, given a file, falls back to an entry *without* a port when none names the
port: a key pinned for ``host`` (port 22) would then vouch for any sshd on that host.
OpenSSH looks up ``[host]:port`` for any port but 22 and nothing else, and so does
sand: the file is matched here and asyncssh is handed only the keys that apply.
``@revoked`` and ``@cert-authority`` lines and hashed names keep their meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncssh

Matcher = Callable[[str, str, int | None], Sequence[Any]]


def known_hosts_name(host: str, port: int) -> str:
    """OpenSSH's known_hosts name for an sshd: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def read(path: str | Path) -> asyncssh.SSHKnownHosts:
    return asyncssh.read_known_hosts(str(Path(path).expanduser()))


def matcher(known: asyncssh.SSHKnownHosts) -> Matcher:
    """What ``asyncssh.connect(known_hosts=...)`` calls with the host, its address and
    port: the trusted, CA and revoked keys of the entries naming that very port."""

    def match(host: str, addr: str, port: int | None) -> Sequence[Any]:
        # The name as the person wrote it, in the port's own form (so asyncssh adds no
        # port and has none to fall back from); not the address it resolved to, as
        # OpenSSH (CheckHostIP off, its default) does not either.
        return known.match(known_hosts_name(host, port or 22), "", None)

    return match


def refusal(what: str, host: str, port: int, path: str, detail: str) -> str:
    """Why the host key of ``what`` (at ``host``:``port``) was not accepted, in words."""
    try:
        trusted, authorities, revoked, *_ = matcher(read(path))(host, "", port)
    except (OSError, ValueError):
        trusted, authorities, revoked = [], [], []
    if "revoked" in detail or (revoked and not trusted):
        return (
            f"the host key of {what} {host}:{port} is marked @revoked in {path}; refusing "
            "to connect"
        )
    if trusted or authorities:
        return (
            f"the host key of {what} {host}:{port} does not match the key pinned in {path} "
            "(it changed: possible man-in-the-middle, or the host was reinstalled; verify "
            "before replacing the entry)"
        )
    name = known_hosts_name(host, port)
    return (
        f"{what} {host}:{port} is not in {path}: its host key is not pinned, so it is not "
        f"trusted ({detail}); add it as {name!r} after checking its fingerprint (an entry "
        "without a port counts for port 22 only)"
    )
