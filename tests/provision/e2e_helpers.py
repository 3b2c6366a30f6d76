"""What the provisioning e2e tests share: endpoints, stand-in agents, and
assertions made inside a real guest (as its user, through a login shell)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any, Protocol

from sand.guest.endpoint import GuestEndpoint, JumpHost


class Guest(Protocol):
    """What NetnsGuest and QemuGuest share."""

    address: str
    port: int
    user: str
    client_key_path: Path
    known_hosts_path: Path

    def run_root(
        self, argv: list[str], *, input: bytes | None = None, timeout: float = 120,
        check: bool = False,
    ) -> subprocess.CompletedProcess[bytes]: ...  # fmt: skip


def endpoint(
    guest: Any, *, alias: str | None = None, policy: str = "pin", jump: JumpHost | None = None
) -> GuestEndpoint:
    return GuestEndpoint(
        host=guest.address,
        port=guest.port,
        user=guest.user,
        identity=str(guest.client_key_path),
        host_key_policy=policy,
        host_key_alias=alias if alias is not None else f"rig-{guest.id}",
        jump=jump,
    )


def stand_in_agents(directory: Path) -> Path:
    """Executables named like the agents: what SAND_AGENT_SOURCE points at offline."""
    directory.mkdir(parents=True, exist_ok=True)
    for agent in ("claude", "codex", "opencode", "pi"):
        path = directory / agent
        path.write_text(f"#!/bin/sh\necho 'stand-in {agent}' \"$@\"\n")
        path.chmod(0o755)
    return directory


def as_user(
    guest: Guest, command: str, user: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``command`` in a login shell of the guest's user (fresh environment)."""
    return guest.run_root(["runuser", "-l", user or guest.user, "-c", command])


def out(guest: Guest, command: str, user: str | None = None) -> str:
    result = as_user(guest, command, user)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout.decode()


def scoped_env(guest: Guest, directory: str, name: str, user: str | None = None) -> str | None:
    """What ``name`` is in a shell working in ``directory`` once direnv has run."""
    script = f'cd {directory} && eval "$(direnv export bash 2>/dev/null)" && printenv {name}'
    result = as_user(guest, f"bash -lc {shlex.quote(script)}", user)
    return result.stdout.decode()[:-1] if result.returncode == 0 else None


def root(guest: Guest, *argv: str) -> str:
    result = guest.run_root(list(argv))
    assert result.returncode == 0, (argv, result.stdout, result.stderr)
    return result.stdout.decode()


def files_under(guest: Guest, directory: str, *find_args: str) -> list[str]:
    """Every non-directory under ``directory`` (on the guest), relative, sorted."""
    listing = root(
        guest, "find", directory, "-mindepth", "1", "!", "-type", "d", *find_args, "-printf", "%P\n"
    )
    return sorted(listing.split())


def home_snapshot(guest: Guest, *paths: str) -> str:
    """Path, mtime, size and mode of everything under ``paths``: equal means untouched."""
    return root(guest, "find", *paths, "-printf", "%p %T@ %s %m\n")


def lima_manifest(project: str, vms: list[dict[str, object]]) -> str:
    """A manifest (JSON, which is YAML) for VMs on the limactl stand-in, each backed by
    its own guest made beforehand (no base derived), with the secret ``NPM_TOKEN`` read
    from ``SAND_TEST_NPM``."""
    return json.dumps(
        {
            "apiVersion": "sand/v1",
            "project": project,
            "backends": {"laptop": {"type": "lima", "lima_home": "./lima", "derive_bases": False}},
            "secrets": {"NPM_TOKEN": {"from": {"env": "SAND_TEST_NPM"}}},
            "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB"},
            "vms": vms,
        }
    )
