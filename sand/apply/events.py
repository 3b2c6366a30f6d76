"""What the apply engine reports while it works: typed events, never prose on a stream.

The engine says *which* VM is in *which* phase, with a detail and the time since that
VM's apply began. Within a phase the backends, the guest transport and provisioning say
their own steps, with the limit of a bounded wait, and their retries (``sand.activity``);
:class:`Steps` hears them for its VM and passes them on as events. How that is shown
(a live board on a terminal, timestamped lines, JSON lines, nothing) is a view in
``sand.cli``. The same events drive the board of ``sand ui`` and the sync controller's
metrics. (Terraform: ``Hook``, with its ``UiHook`` and JSON hook.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from sand.activity import Activity, Retry


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
    # The step's own timeout, when it is a bounded wait ("waiting for the guest agent",
    # 300 s): a view shows how much of it has gone.
    limit: float | None = None
    # Set on an event that reports a retry within the step under way (``detail`` and
    # ``limit`` are still that step's): "PVE 503, retry 2/5 in 1.6s".
    retry: Retry | None = None

    @property
    def text(self) -> str:
        """The step in a person's words (a retry's event: the step it happens in)."""
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
    """One VM's reporter: stamps each event with the VM, its backend and the elapsed time.

    Called by the engine for each phase; :meth:`heard` takes what the layers below say
    within it (listen with ``sand.activity.listening(steps.heard)``)."""

    hooks: Hooks
    vm: str
    backend: str = ""
    started: float = field(default_factory=time.monotonic)
    # The step under way, which a retry belongs to.
    phase: Phase = Phase.CREATING
    detail: str = ""
    limit: float | None = None

    def __call__(self, phase: Phase, detail: str = "", *, layer: str = "") -> None:
        self.phase, self.detail, self.limit = phase, detail, None
        self._emit(layer=layer)

    def heard(self, said: Activity) -> None:
        if said.retry is not None:
            self._emit(retry=said.retry)
            return
        self.detail, self.limit = said.text, said.limit
        self._emit()

    def _emit(self, *, layer: str = "", retry: Retry | None = None) -> None:
        elapsed = time.monotonic() - self.started
        self.hooks.on_step(
            StepEvent(
                self.vm,
                self.phase,
                self.detail,
                elapsed,
                self.backend,
                layer,
                limit=self.limit,
                retry=retry,
            )
        )
