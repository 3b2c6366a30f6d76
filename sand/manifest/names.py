"""Name rules, per backend, checked at load time so a bad name never reaches an API."""

from __future__ import annotations

import re

# Proxmox stores the VM name as a DNS name (pve-common's "dns-name" format).
_PVE_LABEL = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
# Lima instance names become directory names and hostnames (lima-<name>).
_LIMA_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")
IDENTIFIER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The Lima base instance sand builds and clones from; never a manifest VM.
RESERVED_LIMA_PREFIX = "sand-base"


def check_vm_name(name: str, backend_type: str) -> str | None:
    """Return why ``name`` is not allowed on a backend of ``backend_type``, or None."""
    if backend_type == "proxmox":
        labels = name.split(".")
        if len(name) > 253 or not all(_PVE_LABEL.match(label) for label in labels):
            return (
                f"VM name {name!r} is not valid on Proxmox: use letters, digits and '-' "
                "(a DNS name), not starting or ending with '-'"
            )
        return None
    if not _LIMA_NAME.match(name) or name.endswith((".", "-")):
        return (
            f"VM name {name!r} is not valid on Lima: start with a letter or digit, then "
            "letters, digits, '.', '_' or '-' (at most 63 characters)"
        )
    if name.startswith(RESERVED_LIMA_PREFIX):
        return f"VM name {name!r} is reserved for sand's base images on Lima"
    return None
