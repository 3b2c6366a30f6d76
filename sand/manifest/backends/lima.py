"""``type: lima``: Lima on this machine, or on a remote host over SSH.

Everything the manifest layer knows about Lima lives here: the config block, which
VM names Lima can hold, what an ``image`` means, the per-VM rules only Lima has, and
where two Lima backends would collide (one Lima home).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field

from sand.manifest.fields import (
    DERIVE_BASES_DESCRIPTION,
    Executable,
    HostName,
    LocalPath,
    PortNumber,
    SshUser,
    Strict,
)
from sand.manifest.hosts import host as host_key
from sand.manifest.rawdata import Finding, OwnershipScope, as_dict
from sand.manifest.values import local_path_problem
from sand.manifest.yamlmarks import Path

# Instance names become directory names and hostnames (lima-<name>).
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")
CLONE_PARALLELISM = "How many VMs this backend makes at once, 1 to 32."
# The Lima base instances sand builds and clones from; never a manifest VM.
RESERVED_PREFIX = "sand-base"
# The disk a base instance is made with: clones grow from it, never shrink below it.
BASE_DISK = 10 << 30


class SshTarget(Strict):
    """A remote Lima host reached over SSH. Its host key is pinned (known_hosts)."""

    host: HostName = Field(
        description="Host name or IP address (no user, scheme or port).",
        examples=["build-box.lan"],
    )
    user: SshUser | None = Field(
        default=None,
        description="The SSH login (default: your user name here).",
        examples=["dev"],
    )
    port: PortNumber = Field(default=22, description="The SSH port.", examples=[2222])
    identity: LocalPath | None = Field(
        default=None,
        description="Private key to offer; without it the SSH agent and ssh_config identities "
        "are used (this host is yours, so sand does not restrict them).",
        examples=["~/.ssh/id_ed25519"],
    )
    lima_home: LocalPath = Field(
        default=".lima",
        description="LIMA_HOME on the remote host, relative to the login's home.",
        examples=[".lima-sand"],
    )
    known_hosts: LocalPath | None = Field(
        default=None,
        description="known_hosts file pinning the host's key (default: ~/.ssh/known_hosts).",
        examples=["~/.config/sand/known_hosts"],
    )


class LimaConfig(Strict):
    """Lima on this machine, or on a remote host when ``ssh`` is set."""

    TYPE: ClassVar[str] = "lima"
    TITLE: ClassVar[str] = "Lima here, or remote with `ssh`."

    type: Literal["lima"] = Field(description="Lima (limactl, 2.2.0 or later).", examples=["lima"])
    ssh: SshTarget | None = Field(
        default=None,
        description="Run limactl on this remote host over SSH (default: on this machine).",
        examples=[{"host": "build-box.lan", "user": "dev"}],
    )
    lima_home: LocalPath | None = Field(
        default=None,
        description="LIMA_HOME for a local backend (default: Lima's own, ~/.lima); relative to "
        "the manifest's directory. Two backends on one Lima home are refused.",
        examples=["./lima"],
    )
    limactl: Executable = Field(
        default="limactl",
        description="The limactl executable.",
        examples=["/opt/homebrew/bin/limactl"],
    )
    clone_parallelism: int = Field(
        default=2, ge=1, le=32, description=CLONE_PARALLELISM, examples=[4]
    )
    derive_bases: bool = Field(default=True, description=DERIVE_BASES_DESCRIPTION, examples=[False])

    # --- rules the rest of sand asks of a backend type ------------------------------

    @staticmethod
    def name_problem(name: str) -> str | None:
        """Why ``name`` cannot be a Lima instance of sand's, or None."""
        if not _NAME.match(name) or name.endswith((".", "-")):
            return (
                f"VM name {name!r} is not valid on Lima: start with a letter or digit, then "
                "letters, digits, '.', '_' or '-' (at most 63 characters)"
            )
        if name.startswith(RESERVED_PREFIX):
            return f"VM name {name!r} is reserved for sand's base images on Lima"
        return None

    def derives_base_for(self, disk: int) -> bool:
        """Whether a VM of ``disk`` bytes may be cloned from a base sand derives: a
        clone's disk only grows from its base's (``limactl clone`` refuses to shrink it)."""
        return self.derive_bases and disk >= BASE_DISK

    def image_ref(self, vm_image: str | None, default: str | None) -> str:
        """What a VM is made from (a template or an image); changing it replaces the VM."""
        return vm_image or default or "default"

    @staticmethod
    def cpu_type(vm_cpu: str | None) -> str | None:
        """Lima chooses the CPU model itself: sand sets none (``cpu`` is refused)."""
        return None

    @staticmethod
    def vm_findings(
        vm: str,
        at: Path,
        entry: dict[str, Any],
        backend: dict[str, Any],
        defaults: dict[str, Any],
        *,
        golden: bool = False,
    ) -> Iterator[Finding]:
        """Per-VM rules that hold only on Lima, on the raw YAML data (``golden``: the VM
        is made from an image under ``images``)."""
        forked = entry.get("from") is not None  # made from its source's disk, not an image
        if (
            not golden
            and not forked
            and entry.get("image") is None
            and defaults.get("image") is None
        ):
            yield at, f"VM {vm!r} has no image and defaults.image is not set"
        if entry.get("node") is not None:
            yield (*at, "node"), f"VM {vm!r}: 'node' applies only to Proxmox backends"
        if as_dict(entry.get("from")).get("snapshot") == "memory":
            yield (
                (*at, "from", "snapshot"),
                f"VM {vm!r}: Lima cannot fork a running VM's memory (limactl clone copies a "
                "stopped instance's disk); leave out 'snapshot' to fork its disk",
            )
        if entry.get("cpu") is not None:
            yield (*at, "cpu"), f"VM {vm!r}: 'cpu' (the CPU type) applies only to Proxmox backends"

    @staticmethod
    def ownership_scope(backend: dict[str, Any], manifest_dir: str) -> OwnershipScope | None:
        """Where this backend looks for its VMs: one Lima home (local, or of a remote user)."""
        ssh = backend.get("ssh")
        if ssh is None:
            home = backend.get("lima_home")
            if home is not None and (not isinstance(home, str) or local_path_problem(home)):
                return None  # reported where it is written
            path = _local_home(home or "~/.lima", manifest_dir)
            return ("lima", path), f"the Lima home {path}", "give each backend its own lima_home"
        ssh = as_dict(ssh)
        host, user, port = ssh.get("host"), ssh.get("user"), ssh.get("port", 22)
        home = ssh.get("lima_home", ".lima")
        if not isinstance(host, str) or not isinstance(home, str) or local_path_problem(home):
            return None
        if user is None:
            user = _login_name()  # what the SSH connection logs in as
        host = host.lower().rstrip(".")
        remote = _remote_home(home)
        return (
            ("lima-remote", host_key(host), port, user, remote),
            f"the Lima home {remote} of {user}@{host}:{port}",
            "give each backend its own lima_home",
        )


def _local_home(value: str, manifest_dir: str) -> str:
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        path = os.path.join(manifest_dir, path)
    return os.path.realpath(path)


def _remote_home(value: str) -> str:
    # Relative to the login directory, as the Lima backend runs it there.
    if value == "~":
        value = "."
    elif value.startswith("~/"):
        value = value[2:]
    return posixpath.normpath(value)


def _login_name() -> str:
    import getpass  # here, not at the top: a manifest that names no user for a remote host

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""
