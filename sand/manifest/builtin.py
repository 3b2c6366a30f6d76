"""What a VM gets when neither it nor ``defaults`` sets a field.

Kept here, under the models, so the desired state (which applies them), the JSON
Schema and the generated reference (which show them to editors and readers) read
one table and cannot disagree.
"""

from __future__ import annotations

from typing import Any

from sand.manifest.sizes import format_size

DEFAULT_CPUS = 2
DEFAULT_MEMORY = 8 << 30
DEFAULT_DISK = 100 << 30
DEFAULT_USER = "claude"
DEFAULT_AGENTS = ("claude",)
DEFAULT_STATE = "running"
DEFAULT_PROVISION = True
DEFAULT_DOCKER = False

# As a manifest writes them: the `default` the schema and docs/manifest.md show for
# a field that is unset in both the VM and `defaults`.
AS_WRITTEN: dict[str, Any] = {
    "cpus": DEFAULT_CPUS,
    "memory": format_size(DEFAULT_MEMORY),
    "disk": format_size(DEFAULT_DISK),
    "user": DEFAULT_USER,
    "agents": list(DEFAULT_AGENTS),
    "state": DEFAULT_STATE,
    "provision": DEFAULT_PROVISION,
    "docker": DEFAULT_DOCKER,
    "packages": [],
    "preserve": [],
}
