"""What the apply engine reports while it works: typed events, never prose on a stream.

The engine says *which* VM is in *which* phase, with a detail and the time since that
VM's apply began; how that is shown (a live board on a terminal, timestamped lines,
JSON lines, nothing) is a view in ``sand.cli``. The same events will drive the
board of ``sand ui`` and the sync controller's metrics. (Terraform: ``Hook``, with its
``UiHook`` and JSON hook.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Phase(StrEnum):
    GUARDING = "guarding"  # the last look for unpushed work before anything is destroyed
    DELETING = "deleting"
    CREATING = "creating"
    UPDATING = "updating"
    PROVISIONING = "provisioning"
    DELIVERING_SECRETS = "delivering-secrets"
    PRESERVING = "preserving"  # preserve: paths archived, carried over or restored
    RENAMING = "renaming"
    FINISHING = "finishing"  # power state and protection, settled last
    RECORDING = "recording"
    DONE = "done"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in (Phase.DONE, Phase.FAILED)


# What a view shows for a phase that came without a detail.
_WORDS = {Phase.DELIVERING_SECRETS: "delivering secrets", Phase.FINISHING: "setting"}


@dataclass(frozen=True)
class StepEvent:
    vm: str
    phase: Phase
    # The step in a person's words when the phase alone does not say it
    # ("updating cpus, memory", "creating the replacement as agent-1-r3f2").
    detail: str = ""
    elapsed: float = 0.0  # seconds since this VM's apply began
    backend: str = ""
    layer: str = ""  # FAILED only: the layer that failed (ssh, proxmox, lima, host, ...)
    at: float = field(default_factory=time.time)

    @property
    def text(self) -> str:
        if self.detail:
            return self.detail
        if self.phase is Phase.FAILED:
            return f"failed ({self.layer})" if self.layer else "failed"
        return _WORDS.get(self.phase, self.phase.value)


class Hooks(Protocol):
    """Where the engine's events go; ``sand.cli.progress`` has the views."""

    def on_step(self, event: StepEvent) -> None: ...


class NoHooks:
    """Reports nothing (watch runs, tests that look only at the far side)."""

    def on_step(self, event: StepEvent) -> None:
        return None


@dataclass
class Steps:
    """One VM's reporter: stamps each event with the VM, its backend and the elapsed time."""

    hooks: Hooks
    vm: str
    backend: str = ""
    started: float = field(default_factory=time.monotonic)

    def __call__(self, phase: Phase, detail: str = "", *, layer: str = "") -> None:
        elapsed = time.monotonic() - self.started
        self.hooks.on_step(StepEvent(self.vm, phase, detail, elapsed, self.backend, layer))
