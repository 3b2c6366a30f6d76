"""``idle:``: what sand does with a VM nobody has used for a while (docs/agents.md).

Idle means: no agent session ``working``, no ``sand shell``/tmux client attached and no
SSH session, for the whole window ``after`` — never CPU alone (an agent waiting on a
slow build looks busy; one waiting for a person looks idle to a CPU meter and is not
done). ``then`` says how the VM sleeps: ``suspend`` (Proxmox hibernates it to disk,
memory kept, exact resume; Lima has no suspend and stops it) or ``stop``. A VM whose
agent waits for input is only ever suspended, not stopped, unless ``stopWaiting``.
A hibernation saves the guest's RAM to storage: sand first removes the secrets it
delivered, and what it cannot remove (a running agent's environment and login) is
saved only with ``keepMemory``; otherwise the VM is stopped instead (docs/security.md).
A VM's own ``idle:`` replaces the defaults' whole; ``never`` turns it off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, WithJsonSchema

from sand.manifest.fields import Strict

_WINDOW = re.compile(r"^([0-9]{1,6})([mhd])$")
_UNITS = {"m": 60, "h": 3600, "d": 86400}
MIN_WINDOW = 5 * 60  # shorter is a typo: a person reading a log for a minute is not gone
MAX_WINDOW = 30 * 86400
NEVER = "never"
DEFAULT_AFTER = "2h"
_HINT = "write a duration such as '30m', '2h' or '1d' (5m to 30d)"


def canonical_window(value: Any) -> str:
    """The canonical spelling of an ``idle.after``; ``ValueError`` says what is wrong."""
    if isinstance(value, (bool, int, float)):
        raise ValueError(f"{value!r} has no unit: {_HINT}")
    if not isinstance(value, str):
        raise ValueError(_HINT)
    found = _WINDOW.match(value.strip())
    if not found:
        raise ValueError(f"{value.strip()[:40]!r} is not a duration: {_HINT}")
    seconds = int(found[1]) * _UNITS[found[2]]
    if not MIN_WINDOW <= seconds <= MAX_WINDOW:
        raise ValueError(f"{value.strip()!r} is out of range: {_HINT}")
    return f"{int(found[1])}{found[2]}"


def window_seconds(text: str) -> int:
    found = _WINDOW.match(text)
    if not found:
        raise ValueError(f"not a canonical idle window: {text!r}")
    return int(found[1]) * _UNITS[found[2]]


IdleWindow = Annotated[
    str,
    BeforeValidator(canonical_window),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^0*[1-9][0-9]{0,5}[mhd]$",
            "examples": ["30m", "2h", "1d"],
            "description": "How long a VM must have been idle before it sleeps: a "
            "duration, 5m to 30d.",
        }
    ),
]


class Idle(Strict):
    """When a VM nobody uses goes to sleep, and how."""

    after: IdleWindow = Field(
        default=DEFAULT_AFTER,
        description="How long no agent has been working, no shell attached and no SSH "
        "session open before the VM sleeps (default 2h; 5m to 30d).",
        examples=["2h", "45m"],
    )
    then: Literal["suspend", "stop"] = Field(
        default="suspend",
        description="How it sleeps: suspend (Proxmox hibernates it to disk: memory and "
        "running processes kept; Lima has no suspend and stops it) or stop (running "
        "processes and tmux sessions end; files and the agents' conversations stay). "
        "Default suspend.",
        examples=["stop"],
    )
    stop_waiting: bool = Field(
        default=False,
        alias="stopWaiting",
        description="Stop a VM whose agent waits for input too (default false: such a "
        "VM is suspended where the backend can, and otherwise left running).",
        examples=[True],
    )
    keep_memory: bool = Field(
        default=False,
        alias="keepMemory",
        description="Let a hibernation save what sand cannot remove from the guest's RAM "
        "first: the secrets in a running agent's environment, an agent's login (default "
        "false: such a VM is stopped instead, and its secrets delivered again when it "
        "wakes; docs/security.md).",
        examples=[True],
    )


def _which(value: Any) -> str:
    return "idle never" if isinstance(value, str) else "idle policy"


# A VM's ``idle:``: the policy, or ``never`` over one its defaults give. The tags hold a
# space, which no manifest key does, so the loader's locations leave them out, and a
# mapping's errors are its own, not a string's too.
IdleSetting = Annotated[
    Annotated[Idle, Tag("idle policy")] | Annotated[Literal["never"], Tag("idle never")],
    Discriminator(_which),
]


@dataclass(frozen=True)
class IdlePolicy:
    """A VM's ``idle:`` as the planner reads it."""

    after: int  # seconds
    then: str  # "suspend" | "stop"
    stop_waiting: bool = False
    text: str = DEFAULT_AFTER  # how the manifest wrote ``after``
    keep_memory: bool = False  # a hibernation may save secrets it cannot remove first


def policy_of(own: IdleSetting | None, default: IdleSetting | None) -> IdlePolicy | None:
    """The VM's own ``idle:`` (``never`` too) replaces its defaults' whole."""
    chosen = own if own is not None else default
    if chosen is None or chosen == NEVER or not isinstance(chosen, Idle):
        return None
    return IdlePolicy(
        window_seconds(chosen.after),
        chosen.then,
        chosen.stop_waiting,
        chosen.after,
        keep_memory=chosen.keep_memory,
    )
