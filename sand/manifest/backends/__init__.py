"""The backend types a manifest may name, one config block each.

A backend type is a config model here (its fields, name rule, image reference,
per-VM rules and ownership scope) plus its package under ``sand/backends/``; the
layers in between — loader, desired state, planner — ask the config, never the
type's name. A third type is one more module here and one line in each table below.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sand.manifest.backends.lima import LimaConfig, SshTarget
from sand.manifest.backends.proxmox import ProxmoxConfig

BackendConfig = Annotated[LimaConfig | ProxmoxConfig, Field(discriminator="type")]
ConfigClass = type[LimaConfig] | type[ProxmoxConfig]

# ``type:`` value → its config model.
CONFIGS: dict[str, ConfigClass] = {c.TYPE: c for c in (LimaConfig, ProxmoxConfig)}

__all__ = ["CONFIGS", "BackendConfig", "ConfigClass", "LimaConfig", "ProxmoxConfig", "SshTarget"]
