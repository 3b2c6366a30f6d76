"""Error types, named for the layer that failed.

Every error carries what a person needs to act on it; the CLI prints
``str(error)`` and exits 1, never a traceback. ``str(error)`` is always inert
(:mod:`sand.terminal`): an error often quotes a guest, limactl or PVE, and
whatever they wrote must not drive the terminal it is printed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from sand.terminal import inert, quoted


class ErrorLayer(StrEnum):
    """Where a failure happened: what an error, a VM's result, a failed step and a
    retry name (``[layer]`` in output, ``layer`` in JSON and logs)."""

    SAND = "sand"
    # The manifest, the host's state and secrets, and the plan.
    MANIFEST = "manifest"
    SECRETS = "secrets"
    STATE = "state"
    PLAN = "plan"
    GENERATOR = "generator"  # reading a generator's work items
    GUARD = "guard"
    LEASE = "lease"
    # Carrying a plan out: the run, the host, a golden base, the backends.
    APPLY = "apply"
    HOST = "host"
    BASE = "base"
    BACKEND = "backend"
    PROXMOX = "proxmox"
    # Reaching and changing a guest.
    TRANSPORT = "transport"
    SSH = "ssh"
    SFTP = "sftp"
    GUEST = "guest"
    PROVISION = "provision"
    PRESERVE = "preserve"
    # The verbs and what they talk to.
    CLI = "cli"
    VERBS = "verbs"
    SHELL = "shell"
    CP = "cp"
    LAND = "land"
    PUBLISH = "publish"
    FORGE = "forge"
    GH = "gh"
    # What runs by itself, and the board.
    GIT = "git"
    UI = "ui"


class SandError(Exception):
    """Base of every error sand reports to a person."""

    layer: ClassVar[ErrorLayer] = ErrorLayer.SAND

    def __str__(self) -> str:
        return inert(super().__str__())


@dataclass(frozen=True)
class Problem:
    """One problem in a file, located by line and column (1-based)."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


class ManifestError(SandError):
    """The manifest is invalid; holds every problem found, not just the first."""

    layer = ErrorLayer.MANIFEST

    def __init__(self, problems: list[Problem], *, summary: str = "") -> None:
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.column, p.message))
        # What the last line says instead of "the manifest is invalid": a file that
        # could not be read at all is no invalid manifest.
        self.summary = summary
        super().__init__("\n".join(str(p) for p in self.problems))


class SecretError(SandError):
    """A secret source could not be resolved. Never carries the value."""

    layer = ErrorLayer.SECRETS


class BackendError(SandError):
    """A backend (Proxmox API, limactl) refused or failed an operation."""

    layer = ErrorLayer.BACKEND

    def __init__(self, message: str, *, backend: str = "", transient: bool = False) -> None:
        self.backend = backend
        self.transient = transient
        prefix = f"backend {backend}: " if backend else ""
        super().__init__(prefix + message)


class TransportError(SandError):
    """The connection itself failed (SSH to a guest or a remote Lima host)."""

    layer = ErrorLayer.TRANSPORT

    def __init__(self, message: str, *, transient: bool = True) -> None:
        self.transient = transient
        super().__init__(message)


class GuestCommandError(SandError):
    """A command inside the guest ran and failed."""

    layer = ErrorLayer.GUEST

    def __init__(self, step: str, exit_status: int | None, output_tail: str) -> None:
        self.step = step
        self.exit_status = exit_status
        # The guest wrote it: inert, and each line quoted so none passes for sand's own.
        self.output_tail = inert(output_tail)
        super().__init__(
            f"guest step {step!r} failed with exit status {exit_status}; last output:\n"
            f"{quoted(self.output_tail)}"
        )


class StateError(SandError):
    """Host state (journal, lock, plan file) is unusable."""

    layer = ErrorLayer.STATE


class PlanRefused(SandError):
    """A plan is safe to compute but not to apply as it stands (mass delete, stale plan)."""

    layer = ErrorLayer.PLAN
