"""Build backend objects from manifest config: the one place that maps a backend type
to its package. Imports are lazy: proxmoxer, requests and asyncssh load only when a
backend of that type is actually used, which keeps `sand --version` and `sand
validate` fast. A new backend type is one line in ``MAKERS``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

from sand.backends.protocol import Backend
from sand.manifest.backends import BackendConfig

# ``type:`` → (module, function) that builds the backend from its config.
MAKERS: dict[str, tuple[str, str]] = {
    "lima": ("sand.backends.lima", "make_lima_backend"),
    "proxmox": ("sand.backends.proxmox", "make_proxmox_backend"),
}


def make_backend(name: str, config: BackendConfig, *, project: str, manifest_dir: Path) -> Backend:
    module, function = MAKERS[config.type]
    make = getattr(importlib.import_module(module), function)
    backend: Backend = make(name, config, project=project, manifest_dir=manifest_dir)
    return backend


def make_backends(
    configs: Mapping[str, BackendConfig], project: str, manifest_dir: Path
) -> dict[str, Backend]:
    """The backends a manifest's ``backends`` configure, for ``project``."""
    return {
        name: make_backend(name, config, project=project, manifest_dir=manifest_dir)
        for name, config in configs.items()
    }
