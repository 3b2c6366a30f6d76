"""Where a guest is reached: what a backend hands to provisioning and the verbs."""

from __future__ import annotations

from dataclasses import dataclass

# Between a machine's name and one boot of it, in a host-key alias.
BOOT_MARK = ".boot-"


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
    # The name of the machine across its boots when the alias names one boot
    # (``<family><BOOT_MARK><boot>``): pinning a new boot drops the earlier boots' pins.
    host_key_family: str = ""
    jump: JumpHost | None = None


@dataclass(frozen=True)
class JumpHost:
    """The remote Lima host a guest is reached through (keys pinned; agent allowed)."""

    host: str
    port: int
    user: str | None
    identity: str | None
    known_hosts: str | None
