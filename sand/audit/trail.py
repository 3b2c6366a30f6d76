"""What the rest of sand calls: ``record(kind, **fields)`` and ``secret_digest(value)``.

The host's audit log lives in ``<state dir>/audit/`` (``SAND_STATE_DIR`` moves it with
the rest of sand's state). It is one log per host, not per project: one chain, one key
and one exported ref hold everything this user's sand did on this machine, whatever
manifest it ran; each record names its ``project`` where it has one.

For code that lands later (a git-credential broker, egress rules), the whole contract::

    from sand.audit.trail import record, secret_digest
    record("broker.token", vm="agent-1", project="p", remote="github.com/o/r")
    record("secret.delivered", vm="agent-1", name="GH_TOKEN", digest=secret_digest(value))

``kind`` is lowercase words joined by dots (``area.event``); fields are JSON values.
Never pass a secret's value as a field: pass ``secret_digest(value)``. Who (user,
host, process), when (UTC, milliseconds) and sand's version are added here. A record
that cannot be written raises ``StateError``: an action the trail cannot hold is not
one sand carries on with silently.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sand import __version__
from sand.audit.keys import digest_key, keyed_digest
from sand.audit.log import AuditLog
from sand.errors import StateError
from sand.state.paths import state_root

AUDIT_DIR = "audit"
RESERVED = frozenset({"seq", "prev", "kind", "ts", "user", "host", "pid", "version"})

_logs: dict[Path, AuditLog] = {}


def audit_dir() -> Path:
    return state_root() / AUDIT_DIR


def host_log() -> AuditLog:
    """This process's handle on the host's log (one per directory, kept open)."""
    directory = audit_dir()
    log = _logs.get(directory)
    if log is None:
        log = _logs[directory] = AuditLog(directory)
    return log


def record(kind: str, **fields: Any) -> int:
    """Append one record to the host's audit log; its sequence number."""
    clash = RESERVED & fields.keys()
    if clash:
        raise ValueError(f"audit fields {sorted(clash)} are the log's own")
    try:
        return host_log().append(kind, {**who(), **fields})
    except OSError as exc:
        raise StateError(f"cannot write the audit log in {audit_dir()}: {exc}") from exc


def seal() -> None:
    """Sign the log as it stands (a checkpoint, fsync, ``head.json``): what a run that
    changed something calls at its end, so its records need not wait for the next
    thousand to be vouched for."""
    try:
        host_log().checkpoint()
    except OSError as exc:
        raise StateError(f"cannot write the audit log in {audit_dir()}: {exc}") from exc


def who() -> dict[str, Any]:
    return {
        "ts": now(),
        "user": _user(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
    }


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def secret_digest(value: str | bytes) -> str:
    """The keyed digest the log holds in place of a secret value."""
    raw = value.encode() if isinstance(value, str) else value
    return keyed_digest(digest_key(host_log().directory), raw)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def secrets_delivered(vm: str, target: str, values: Mapping[str, str]) -> None:
    """Each secret a delivery put in the guest, named, with a keyed digest: never its value."""
    for name in sorted(values):
        record(
            "secret.delivered", vm=vm, target=target, name=name, digest=secret_digest(values[name])
        )
