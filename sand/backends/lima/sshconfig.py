"""Read the ``ssh.config`` Lima writes into an instance directory.

Lima's host agent writes it on start (``pkg/hostagent/hostagent.go``,
``pkg/sshutil/format.go``): ``Host lima-<name>`` then two-space-indented ``Key Value``
lines (``IdentityFile "<LIMA_HOME>/_config/user"``, ``User``, ``Hostname``, ``Port``,
and ``StrictHostKeyChecking no`` / ``UserKnownHostsFile /dev/null`` — which sand does
not inherit: it pins guest host keys itself).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SshConfig:
    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    identity: str | None = None


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_ssh_config(text: str, host: str | None = None) -> SshConfig:
    """The first ``Host`` block (or the one naming ``host``); first value of a key wins."""
    values: dict[str, str] = {}
    in_block = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        if "=" in key:
            key, _, rest = line.partition("=")
            value = rest
        key = key.strip().lower()
        if key == "host":
            if in_block:
                break
            names = value.split()
            in_block = host is None or host in names
            continue
        if in_block and key not in values:
            values[key] = _unquote(value)
    port = values.get("port")
    return SshConfig(
        hostname=values.get("hostname") or None,
        port=int(port) if port and port.isdigit() else None,
        user=values.get("user") or None,
        identity=values.get("identityfile") or None,
    )
