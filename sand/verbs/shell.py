"""``sand shell``: the system ``ssh`` for a person at a terminal, argv only.

The argv carries the same stance as sand's own transport
(:mod:`sand.guest.ssh`): only the endpoint's identity is offered
(``IdentitiesOnly``, no agent), nothing is forwarded, ``~/.ssh/config`` is not
read for the guest (``-F``), and the host key is checked against sand's pinned
``known_hosts`` under the endpoint's alias -- or, for policy ``none``
(Proxmox's cattle IPs), not at all, as the security model explains. A jump
host gets a private ``ssh_config`` holding only what the backend said about
it, since ``-J`` alone cannot carry its identity or known_hosts file.

Without a command the guest side is a tmux session named after the VM,
attached when it exists and created when not, so what runs in it (an agent)
outlives a dropped connection; ``--new`` starts another session beside it.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from sand.errors import ErrorLayer, SandError, TransportError
from sand.guest.endpoint import GuestEndpoint, JumpHost

JUMP_ALIAS = "sand-jump"
_SAFE_OPTION = re.compile(r"^[^\s\"'\\]+$")
# tmux itself rewrites ':' and '.' in a session name (they separate window and pane in
# a target); keeping to these characters makes the name the same for sand, for tmux
# and for the person reading `tmux ls`.
_SESSION_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

# The guest side of an interactive `sand shell`, run by /bin/sh as the user.
# $1: the session name (session_name()), $2: "attach" or "new". "attach" joins the
# VM's session or creates it; "new" creates the first free NAME-2, NAME-3, ... (an
# independent session that persists too; inside tmux, `prefix s` switches between
# them). Without tmux, or without a terminal to run it on, a plain login shell.
TMUX_SCRIPT = r"""
s=$1
if ! command -v tmux >/dev/null 2>&1; then
  echo "sand: no tmux in this guest: a plain login shell (it ends with the connection)" >&2
  exec "${SHELL:-/bin/sh}" -l
fi
if [ ! -t 0 ]; then
  echo "sand: no terminal for tmux: a plain login shell" >&2
  exec "${SHELL:-/bin/sh}" -l
fi
if [ "$2" = new ]; then
  n=2
  while tmux has-session -t "=$s-$n" 2>/dev/null; do n=$((n + 1)); done
  exec tmux new-session -s "$s-$n"
fi
exec tmux new-session -A -s "$s"
"""


class ShellRefused(SandError):
    layer = ErrorLayer.SHELL


def session_name(vm: str) -> str:
    """The guest tmux session a VM's ``sand shell`` attaches: the VM's name, made safe."""
    return _SESSION_UNSAFE.sub("_", vm) or "sand"


def tmux_command(vm: str, *, new: bool = False) -> str:
    """The remote command line of an interactive ``sand shell`` (the login shell runs it)."""
    mode = "new" if new else "attach"
    return shlex.join(["/bin/sh", "-c", TMUX_SCRIPT, "sand-shell", session_name(vm), mode])


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
    command: str | None = None,
    tty: bool = False,
) -> list[str]:
    """The ``ssh`` argv for ``endpoint``; ``config`` is required with a jump host.

    ``command``: a remote command line (else the login shell); ``tty``: ask for a
    terminal for it (``-t``), as ``ssh`` gives the login shell one by itself."""
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
    if tty:
        argv.append("-t")
    argv += ["-p", str(endpoint.port), "-l", endpoint.user]
    return [*argv, "--", endpoint.host, *([command] if command is not None else [])]
