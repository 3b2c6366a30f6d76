"""Proxmox VE backend: VMs cloned from a template into a pool, driven by a pool-scoped token.

Modules: ``client`` (proxmoxer wrapper: retries, task polling, errors classified
into ``errors.ErrorKind``), ``marker`` (tags and description, read as ownership
claims), ``observe`` (one listing, deep reads on mismatch), ``create`` (adopt or
``clone`` into an id ``vmids`` counts, then configure), ``lifecycle`` (update, delete,
mark), ``recover`` (journal replay: decide, then act; VMs a listing left out), ``guest`` (the
guest agent address), ``firewall`` (a VM's egress, in the PVE firewall), ``firewall_drift`` (that
firewall read back each plan: a hand's change is drift), ``doctor`` and
``backend``.
proxmoxer and requests load only when a backend is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.client import PveClient
from sand.backends.proxmox.context import Ctx

if TYPE_CHECKING:
    from sand.backends.protocol import Backend
    from sand.manifest.backends import ProxmoxConfig


def resolve_path(value: str, manifest_dir: Path) -> Path:
    """``~`` expanded; relative paths are relative to the manifest's directory."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else manifest_dir / path


def make_proxmox_backend(
    name: str, config: ProxmoxConfig, *, project: str, manifest_dir: Path
) -> Backend:
    """Build the backend; nothing is read or contacted until it is first used."""
    verify: bool | str = config.verify_tls
    if config.verify_tls and config.ca_file:
        verify = str(resolve_path(config.ca_file, manifest_dir))
    client = PveClient(
        backend=name,
        host=config.host,
        port=config.port,
        token_file=resolve_path(config.token_file, manifest_dir),
        verify=verify,
    )
    ctx = Ctx(
        name=name,
        project=project,
        config=config,
        client=client,
        identity=resolve_path(config.identity, manifest_dir),
    )
    return ProxmoxBackend(ctx)


__all__ = ["make_proxmox_backend", "resolve_path"]
