"""Build backend objects from manifest config. Imports are lazy: proxmoxer,
requests and asyncssh load only when a backend of that type is actually used,
which keeps `sand --version` and `sand validate` fast."""

from __future__ import annotations

from pathlib import Path

from sand.backends.protocol import Backend
from sand.manifest.models import LimaConfig, Manifest, ProxmoxConfig


def make_backend(
    name: str, config: LimaConfig | ProxmoxConfig, *, project: str, manifest_dir: Path
) -> Backend:
    if isinstance(config, ProxmoxConfig):
        from sand.backends.proxmox import make_proxmox_backend

        return make_proxmox_backend(name, config, project=project, manifest_dir=manifest_dir)
    from sand.backends.lima import make_lima_backend

    return make_lima_backend(name, config, project=project, manifest_dir=manifest_dir)


def make_backends(manifest: Manifest, manifest_dir: Path) -> dict[str, Backend]:
    return {
        name: make_backend(name, config, project=manifest.project, manifest_dir=manifest_dir)
        for name, config in manifest.backends.items()
    }
