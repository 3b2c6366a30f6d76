"""Read the ``ssh.config`` Lima writes into an instance directory.

Lima's host agent writes it on start (``pkg/hostagent/hostagent.go``,
``pkg/sshutil/format.go``): ``Host lima-<name>`` then two-space-indented ``Key Value``
lines (``IdentityFile "<LIMA_HOME>/_config/user"``, ``User``, ``Hostname``, ``Port``,
and ``StrictHostKeyChecking no`` / ``UserKnownHostsFile /dev/null`` — which sand does
not inherit: it pins guest host keys itself).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class SshConfig:
    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    identity: str | None = None


# OpenSSH's readconf.c: a keyword, then whitespace or one "=" (with whitespace around
# it), then arguments split as its argv_split() does: double or single quotes group,
# a backslash escapes, an argument starting with "#" ends the line. Keywords are
# case-insensitive; spaces and tabs are the same.
_LINE = re.compile(r"\s*([A-Za-z][A-Za-z0-9]*)(?:\s*=\s*|\s+)(.*)$")


def _arguments(rest: str) -> list[str]:
    try:
        return shlex.split(rest, comments=True, posix=True)
    except ValueError:  # an unterminated quote: OpenSSH refuses the line too
        return []


def parse_ssh_config(text: str, host: str | None = None) -> SshConfig:
    """The first ``Host`` block (or the one naming ``host``); first value of a key wins,
    as in OpenSSH. A ``Match`` block ends a ``Host`` block and is not read."""
    values: dict[str, str] = {}
    in_block = False
    for raw in text.splitlines():
        found = _LINE.match(raw)
        if found is None or raw.lstrip().startswith("#"):
            continue
        key, args = found.group(1).lower(), _arguments(found.group(2))
        if not args:
            continue
        if key in ("host", "match"):
            if in_block:
                break
            in_block = key == "host" and (host is None or host in args)
            continue
        if in_block and key not in values:
            values[key] = args[0]
    port = values.get("port")
    return SshConfig(
        hostname=values.get("hostname") or None,
        port=int(port) if port and port.isdigit() and 0 < int(port) < 65536 else None,
        user=values.get("user") or None,
        identity=values.get("identityfile") or None,
    )
