"""Parse ``limactl list --json`` (JSON Lines) and the framed output of the observe script.

``limactl list --json`` prints one compact JSON object per instance per line, never an
array (``cmd/limactl/list.go``); field names are those of ``limatype.Instance`` plus the
deprecated host-wide ``LimaHome``/``IdentityFile``. A line that is not a JSON object
makes the whole listing untrusted: a hidden instance must never read as "gone".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_HEADER = re.compile(rb"^@sand (\S+) (\S+) (\d+)$")

# Older listings fail while any instance is being cloned or deleted (lima-vm/lima#5236).
MIN_VERSION = (2, 2, 0)


@dataclass(frozen=True)
class LimaInstance:
    name: str
    status: str
    dir: str
    cpus: int | None
    memory: int | None
    disk: int | None
    ssh_local_port: int
    ssh_address: str
    ssh_config_file: str
    protected: bool
    lima_version: str
    identity_file: str
    lima_home: str
    param: Mapping[str, str]
    config: Mapping[str, Any] | None
    errors: tuple[str, ...]
    host_agent_pid: int = 0

    @property
    def readable(self) -> bool:
        """False for a directory Lima lists without a lima.yaml (mid-clone/mid-delete)."""
        return self.config is not None

    @property
    def power(self) -> str:
        return {"Running": "running", "Stopped": "stopped"}.get(self.status, "unknown")

    @property
    def user(self) -> str:
        user = (self.config or {}).get("user") or {}
        return str(user.get("name") or "") if isinstance(user, dict) else ""


class ListingError(ValueError):
    """The listing could not be parsed; its instances are unknown."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_instance(obj: Mapping[str, Any]) -> LimaInstance:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ListingError(f"an instance without a name: {json.dumps(obj)[:200]}")
    config = obj.get("config")
    param = obj.get("param") or (config or {}).get("param") or {}
    errors = obj.get("errors") or []
    return LimaInstance(
        name=name,
        status=str(obj.get("status") or ""),
        dir=str(obj.get("dir") or ""),
        cpus=_int(obj.get("cpus")),
        memory=_int(obj.get("memory")),
        disk=_int(obj.get("disk")),
        ssh_local_port=_int(obj.get("sshLocalPort")) or 0,
        ssh_address=str(obj.get("sshAddress") or "127.0.0.1"),
        ssh_config_file=str(obj.get("sshConfigFile") or ""),
        protected=bool(obj.get("protected")),
        lima_version=str(obj.get("limaVersion") or ""),
        identity_file=str(obj.get("IdentityFile") or ""),
        lima_home=str(obj.get("LimaHome") or ""),
        param={str(k): str(v) for k, v in param.items()} if isinstance(param, dict) else {},
        config=config if isinstance(config, dict) else None,
        errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (str(errors),),
        host_agent_pid=_int(obj.get("hostAgentPID")) or 0,
    )


def parse_list(stdout: bytes) -> list[LimaInstance]:
    out: list[LimaInstance] = []
    for n, raw in enumerate(stdout.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ListingError(f"line {n} of `limactl list --json` is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ListingError(f"line {n} of `limactl list --json` is not a JSON object")
        out.append(parse_instance(obj))
    return out


@dataclass
class Frames:
    """What the observe script printed: ``@sand KIND KEY LENGTH`` then LENGTH bytes."""

    version: str | None = None
    list_rc: int | None = None
    list_stdout: bytes = b""
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    host_agent_started: dict[str, float] = field(default_factory=dict)  # instance -> epoch
    leases: dict[str, bytes] = field(default_factory=dict)  # project -> its lease record


def iter_frames(data: bytes, what: str = "the observe script") -> Iterator[tuple[str, str, bytes]]:
    """``(kind, key, body)`` for each ``@sand KIND KEY LENGTH`` frame a fixed script printed."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            raise ListingError(f"truncated output from {what}")
        m = _HEADER.match(data[pos:end])
        if not m:
            raise ListingError(f"unexpected output from {what}: {data[pos:end][:80]!r}")
        kind, key, length = m.group(1).decode(), m.group(2).decode(), int(m.group(3))
        body = data[end + 1 : end + 1 + length]
        if len(body) != length:
            raise ListingError(f"truncated output from {what}")
        pos = end + 1 + length
        if data[pos : pos + 1] == b"\n":
            pos += 1
        yield kind, key, body


def parse_frames(data: bytes) -> Frames:
    frames = Frames()
    for kind, key, body in iter_frames(data):
        if kind == "version":
            frames.version = body.decode(errors="replace").strip()
        elif kind == "list":
            frames.list_rc = int(key)
            frames.list_stdout = body
        elif kind == "file":
            inst, _, fname = key.partition("/")
            frames.files[(inst, fname)] = body
        elif kind == "hastart" and body.strip().isdigit():
            frames.host_agent_started[key] = float(body.strip())
        elif kind == "lease":
            frames.leases[key] = body
    if frames.list_rc is None:
        raise ListingError("the observe script printed no listing")
    return frames


def version_tuple(text: str) -> tuple[int, ...]:
    """``limactl version 2.2.0`` / ``2.1.1-23-gabc`` → (2, 2, 0); () when unreadable."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return ()
    return tuple(int(g or 0) for g in m.groups())
