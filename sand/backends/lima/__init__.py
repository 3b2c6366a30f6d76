"""The Lima backend (``type: lima``): local ``limactl``, or ``limactl`` on a remote host
over one SSH connection. See ``docs/backends/lima.md``.

Modules, cut the way ``sand.backends.proxmox`` is: ``backend`` (the Backend, a facade
over the rest), ``context`` (what every operation needs), ``vmops`` (limactl and script
calls on one instance), ``observe`` (the one listing and per-name reads), ``golden``
(the golden bases VMs are cloned from), ``create``, ``lifecycle`` (update, delete, rename, mark),
``guest`` (the SSH endpoint), ``recover``, ``preflight``, ``doctor``; beneath them
``runner`` (the :class:`HostRunner` seam, local or SSH), ``scripts`` (the fixed sh
scripts run next to limactl), ``listing`` (JSON Lines parsing), ``limayaml`` (generated
lima.yaml and the security checks), ``marker`` (the sidecar and ownership),
``sshconfig``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sand.backends.lima.backend import LimaBackend
from sand.backends.lima.lifecycle import FIELD_POLICY
from sand.backends.lima.runner import HostRunner, LocalRunner
from sand.backends.protocol import Backend
from sand.errors import BackendError
from sand.guest.endpoint import JumpHost
from sand.manifest.backends import LimaConfig
from sand.manifest.values import executable_problem, hostname_problem, ssh_user_problem

__all__ = ["FIELD_POLICY", "LimaBackend", "make_lima_backend"]


def _local_path(value: str, manifest_dir: Path) -> str:
    """``~`` expanded; a relative path is relative to the manifest's directory."""
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else (manifest_dir / p).resolve())


def _executable(value: str, manifest_dir: Path) -> str:
    """A bare name is looked up on PATH; anything with a slash is a path."""
    return _local_path(value, manifest_dir) if "/" in value else value


def _remote_home(value: str) -> str:
    # The remote command runs in the login directory, so "~/x" is just "x" there;
    # quoting keeps the remote shell from expanding anything.
    if value == "~":
        return "."
    return value[2:] if value.startswith("~/") else value


def _refuse(name: str, what: str, problem: str | None) -> None:
    # The manifest refuses these at validate time; this holds for any other way in.
    if problem:
        raise BackendError(f"refusing {what}: {problem}", backend=name)


def make_lima_backend(
    name: str, config: LimaConfig, *, project: str, manifest_dir: Path
) -> Backend:
    _refuse(name, "limactl", executable_problem(config.limactl))
    if config.ssh is not None:
        _refuse(name, "ssh.host", hostname_problem(config.ssh.host))
        if config.ssh.user is not None:
            _refuse(name, "ssh.user", ssh_user_problem(config.ssh.user))
    runner: HostRunner
    jump: JumpHost | None = None
    if config.ssh is None:
        home = _local_path(config.lima_home, manifest_dir) if config.lima_home else None
        runner = LocalRunner(backend=name, lima_home=home)
        limactl = _executable(config.limactl, manifest_dir)
    else:
        # Here, in the remote branch: asyncssh (which remote.py imports) is a remote
        # host's alone, and a local Lima backend never loads it.
        from sand.backends.lima.remote import RemoteRunner, RemoteTarget

        ssh = config.ssh
        identity = _local_path(ssh.identity, manifest_dir) if ssh.identity else None
        known_hosts = _local_path(ssh.known_hosts or "~/.ssh/known_hosts", manifest_dir)
        target = RemoteTarget(
            host=ssh.host,
            port=ssh.port,
            user=ssh.user,
            identity=identity,
            known_hosts=known_hosts,
            lima_home=_remote_home(ssh.lima_home),
        )
        runner = RemoteRunner(backend=name, target=target)
        jump = JumpHost(
            host=ssh.host,
            port=ssh.port,
            user=ssh.user,
            identity=identity,
            known_hosts=known_hosts,
        )
        limactl = config.limactl  # resolved on the remote host's PATH
    return LimaBackend(
        name,
        project=project,
        runner=runner,
        limactl=limactl,
        clone_parallelism=config.clone_parallelism,
        jump=jump,
    )
