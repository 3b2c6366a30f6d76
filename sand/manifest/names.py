"""Identifier rules shared by the manifest's fields (project ids, variable names)."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Names sand gives its own objects on a backend; a VM of the manifest named like one
# would be taken for it (or it for the VM): a replacement under its temporary name
# (sand.apply.replace), the project's lease on Proxmox (sand.backends.proxmox.lease),
# golden bases (Proxmox ``sand-golden-<image>-<fp8>``, Lima ``sand-base…``).
TEMP_SUFFIX = "-sandnew"
_TEMP_NAME = re.compile(r"-sandnew[0-9a-f]{4}$")
RESERVED_PREFIXES = ("sand-lease-", "sand-golden-", "sand-base")


def reserved_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a manifest VM's: it is shaped like one of sand's own."""
    if _TEMP_NAME.search(name):
        return (
            f"VM name {name!r} is shaped like sand's temporary name for a replacement "
            "(NAME-sandnew<4 hex digits>); choose another"
        )
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"VM name {name!r} is reserved: names starting {prefix!r} are sand's own"
    return None
