"""Where a guest is reached: what a backend hands to provisioning and the verbs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GuestEndpoint:
    """How provisioning reaches a guest over SSH."""

    host: str
    port: int
    user: str
    identity: str  # private key path; IdentitiesOnly: the only key offered
    # Host-key policy: "pin" (trust on first use, then refuse a change: Lima guests),
    # or "none" (Proxmox cattle IPs; see the security model).
    host_key_policy: str = "pin"
    host_key_alias: str = ""  # the name keys are pinned under (stable across IP reuse)
    jump: JumpHost | None = None


@dataclass(frozen=True)
class JumpHost:
    """The remote Lima host a guest is reached through (keys pinned; agent allowed)."""

    host: str
    port: int
    user: str | None
    identity: str | None
    known_hosts: str | None
