"""The broker's host state: who may do what, where it listens, what it did.

All of it sits in the project's private state directory, under ``broker/``:

- ``grants.json``: per VM, the sha-256 of its broker credential (never the
  credential), the address its requests must come from ("" when the backend's
  guests reach the host through a loopback forward: Lima), the address the broker
  listens on for it, and its grants (the brokered secrets' rules, never a value). A
  VM's entry goes with the VM.
- ``run.json``: the running broker's pid and its listening addresses' ports.
- ``control.sock``: where an apply hands the broker the token values (they live in
  its memory only) and tells it the grants changed.
- ``operations.jsonl``: one JSON line per operation the broker allowed or refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from sand.desired.brokered import BrokerGrant
from sand.secrets.files import locked, write_private
from sand.state.paths import project_dir
from sand.state.private import ensure_private_dir, read_private

CONTROL = "control.sock"
# sun_path holds 108 bytes with its NUL: a longer state directory (a deep $SAND_STATE_DIR)
# is reached through a descriptor of it, /proc/self/fd/N, on Linux.
MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class VMGrants:
    credential: str  # sha-256 (hex) of the VM's broker credential
    source: str  # the only address its requests may come from; "" for a loopback forward
    grants: tuple[BrokerGrant, ...]
    # The broker's listening address for this VM (its port is in run.json): where a
    # Proxmox VM's firewall lets it through (docs/egress.md#proxmox). "" in an entry
    # written before it was recorded.
    listen: str = ""


@dataclass(frozen=True)
class Running:
    pid: int
    ports: dict[str, int]  # listening address -> its port


def broker_dir(project: str) -> Path:
    return ensure_private_dir(project_dir(project) / "broker")


def broker_dir_if_any(project: str) -> Path | None:
    """The project's broker directory when a broker was ever started here; makes nothing."""
    directory = project_dir(project) / "broker"
    return directory if directory.is_dir() else None


def credential_hash(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


def read_grants(directory: Path) -> dict[str, VMGrants]:
    try:
        data = json.loads(read_private(directory / "grants.json"))
    except FileNotFoundError:
        return {}
    return {
        vm: VMGrants(
            e["credential"],
            e["source"],
            tuple(
                BrokerGrant(
                    g["secret"],
                    tuple(g["repositories"]),
                    tuple(g["push"]),
                    tuple(g.get("api", ())),
                    tuple(g.get("https_hosts", ())),
                    g.get("header", ""),
                )
                for g in e["grants"]
            ),
            e.get("listen", ""),
        )
        for vm, e in data.items()
    }


def update_grants(directory: Path, vm: str, entry: VMGrants | None) -> dict[str, VMGrants]:
    """Set (or with None, drop) ``vm``'s entry; the grants as they are after."""
    path = directory / "grants.json"
    with locked(path):
        grants = read_grants(directory)
        if entry is None:
            grants.pop(vm, None)
        else:
            grants[vm] = entry
        data = {name: asdict(e) for name, e in sorted(grants.items())}
        write_private(path, json.dumps(data, indent=1).encode())
    return grants


def read_running(directory: Path) -> Running | None:
    try:
        data = json.loads(read_private(directory / "run.json"))
    except (FileNotFoundError, ValueError):
        return None
    return Running(int(data["pid"]), {str(a): int(p) for a, p in data["ports"].items()})


def serving(project: str) -> bool:
    """Whether the project's broker runs on this host: its ``run.json`` names a live
    broker process (not one that a restart of this host or a kill left behind). Reads
    only; makes nothing."""
    try:
        running = read_running(project_dir(project) / "broker")
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return running is not None and process_runs(running.pid, b"sand.broker")


def process_runs(pid: int, module: bytes) -> bool:
    """Whether ``pid`` is a live process running ``python -m <module>``; where there is no
    /proc to tell (macOS), whether ``pid`` lives at all."""
    try:
        return module in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return False  # gone
    except OSError:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, another user's
    except OSError:
        return False
    return True


def write_running(directory: Path, running: Running) -> None:
    write_private(directory / "run.json", json.dumps(asdict(running)).encode())


def reached_at(project: str, vm: str) -> tuple[str, int] | None:
    """Where ``vm``'s guest reaches the broker now: the address its entry names and that
    listener's port in ``run.json`` (a restarted broker listens on a new one), or None:
    the VM has no entry, or no broker has listened there. Reads only; makes nothing."""
    directory = project_dir(project) / "broker"
    if not directory.is_dir():
        return None
    entry = read_grants(directory).get(vm)
    running = read_running(directory)
    if entry is None or running is None or entry.listen not in running.ports:
        return None
    return entry.listen, running.ports[entry.listen]


@contextlib.contextmanager
def control_address(directory: Path) -> Iterator[str]:
    """The path a process binds or connects the broker's control socket at."""
    path = os.fspath(directory / CONTROL)
    if len(path) <= MAX_SOCKET_PATH:
        yield path
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{CONTROL}"
    finally:
        os.close(fd)
