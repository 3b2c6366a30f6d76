"""Identifier rules shared by the manifest's fields (project ids, variable names)."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The Lima base instances' prefix (also ``sand.manifest.backends.lima.RESERVED_PREFIX``).
RESERVED_LIMA_PREFIX = "sand-base"


def check_vm_name(name: str, backend_type: str) -> str | None:
    """Why ``name`` cannot be a VM on a backend of ``backend_type`` (its config's rule)."""
    from sand.manifest.backends import CONFIGS  # the configs build on this module

    return CONFIGS[backend_type].name_problem(name)
