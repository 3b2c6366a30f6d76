"""``sand shell``: the system ``ssh`` for a person at a terminal, argv only.

The argv carries the same stance as sand's own transport
(:mod:`sand.guest.ssh`): only the endpoint's identity is offered
(``IdentitiesOnly``, no agent), nothing is forwarded, ``~/.ssh/config`` is not
read for the guest (``-F``), and the host key is checked against sand's pinned
``known_hosts`` under the endpoint's alias -- or, for policy ``none``
(Proxmox's cattle IPs), not at all, as the security model explains. A jump
host gets a private ``ssh_config`` holding only what the backend said about
it, since ``-J`` alone cannot carry its identity or known_hosts file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sand.errors import SandError, TransportError
from sand.guest.endpoint import GuestEndpoint, JumpHost

JUMP_ALIAS = "sand-jump"
_SAFE_OPTION = re.compile(r"^[^\s\"'\\]+$")


class ShellRefused(SandError):
    layer = "shell"


def quote_config(value: str) -> str:
    """A value for an ssh_config line or a ``-o`` option (ssh tokenises both)."""
    if not value or any(ch in value for ch in '"\n\r\0') or not value.isprintable():
        raise TransportError(f"{value!r} cannot be written into an ssh option", transient=False)
    return f'"{value}"' if any(ch.isspace() or ch in "'\\#" for ch in value) else value


def jump_config(jump: JumpHost) -> str:
    # ssh runs `ssh ... HostName` for -J: a value starting with '-' would be an option.
    for value in (jump.host, jump.user or ""):
        if value.startswith("-"):
            raise TransportError(f"jump host value {value!r} starts with '-'", transient=False)
    lines = [f"Host {JUMP_ALIAS}", f"  HostName {quote_config(jump.host)}", f"  Port {jump.port}"]
    if jump.user:
        lines.append(f"  User {quote_config(jump.user)}")
    if jump.identity:
        lines.append(f"  IdentityFile {quote_config(str(Path(jump.identity).expanduser()))}")
    if jump.known_hosts:
        lines.append(
            f"  UserKnownHostsFile {quote_config(str(Path(jump.known_hosts).expanduser()))}"
        )
    return "\n".join(lines) + "\n"


def ssh_argv(
    endpoint: GuestEndpoint,
    *,
    known_hosts: Path,
    alias: str,
    config: Path | None = None,
    ssh: str | None = None,
) -> list[str]:
    """The ``ssh`` argv for ``endpoint``; ``config`` is required with a jump host."""
    binary = ssh or shutil.which("ssh")
    if binary is None:
        raise ShellRefused("no ssh client found on PATH")
    if endpoint.jump is not None and config is None:
        raise ValueError("a jump host needs its ssh_config")
    argv = [binary, "-F", str(config) if config else "/dev/null"]
    argv += ["-i", str(Path(endpoint.identity).expanduser())]
    for option in (
        "IdentitiesOnly=yes",
        "IdentityAgent=none",
        "ForwardAgent=no",
        "ForwardX11=no",
        "ClearAllForwardings=yes",
        "PermitLocalCommand=no",
        "GlobalKnownHostsFile=/dev/null",
    ):
        argv += ["-o", option]
    if endpoint.host_key_policy == "pin":
        if not _SAFE_OPTION.match(alias):
            raise TransportError(f"host-key alias {alias!r} is not usable", transient=False)
        argv += [
            "-o", f"UserKnownHostsFile={quote_config(str(known_hosts))}",
            "-o", f"HostKeyAlias={alias}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UpdateHostKeys=no",
        ]  # fmt: skip
    elif endpoint.host_key_policy == "none":
        argv += [
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR",
        ]  # fmt: skip
    else:
        raise TransportError(
            f"unknown host-key policy {endpoint.host_key_policy!r}", transient=False
        )
    if endpoint.jump is not None:
        argv += ["-J", JUMP_ALIAS]
    argv += ["-p", str(endpoint.port), "-l", endpoint.user]
    return [*argv, "--", endpoint.host]
