"""Whether a running VM has been idle long enough to sleep, and whether one sleeps now.

Pure: the facts come from the survey (who uses the guest, as its deep-check exchange
told: :class:`sand.agentstate.GuestPresence`) and from the host's record of the VMs
sand put to sleep; the answer is data the plan carries. Idle means no agent session
``working``, no tmux client attached and no SSH session, for the whole window — never
CPU alone. A guest that did not answer, or answered what is not an answer, is never
idle: sand puts to sleep only what it saw unused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sand.manifest.idle import IdlePolicy
from sand.observed import SLEEP_WAYS, STOPPED, SUSPENDED, ObservedVM

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import GuestPresence

# What a stop costs the guest (SUSPENDED and STOPPED: sand.observed's words).
STOP_LOSES = (
    "a stop ends running processes and tmux sessions; files and the agents' "
    "conversations stay on disk"
)


@dataclass(frozen=True)
class Sleep:
    """A running VM going to sleep: how (``suspended``/``stopped``) and why."""

    how: str
    idle_for: int  # seconds
    why: str  # "idle 2h14m: no agent working, no shell attached"
    # A hibernation: the delivered secrets removed from the guest first (by name),
    # delivered again at wake; what its saved memory still holds (only with keepMemory).
    scrubbed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    # Stopped where the policy said suspend: a hibernation would have saved ``held``.
    held: tuple[str, ...] = ()


@dataclass(frozen=True)
class Asleep:
    """A VM asleep: since when (epoch seconds; 0: not known), how, and by whose
    decision ("idle": the policy; "person": ``sand sleep``)."""

    how: str
    since: float = 0.0
    by: str = "idle"
    identity: str = ""  # the VM put to sleep ("": not recorded, a hibernation seen)

    def since_utc(self) -> str | None:
        """``since`` as the JSON outputs give every time: ISO 8601 in UTC (None: not
        recorded), as ``last_reconcile`` and a lease's ``since`` are."""
        if not self.since:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))


def span(seconds: float) -> str:
    """2h14m, 45m, 3d2h: two units at most."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m"


def last_use(presence: GuestPresence, booted_at: float | None) -> float | None:
    """When the guest was last seen in use: the latest of an agent session leaving
    ``working``, tmux clients coming or going, and the guest's boot (a VM just woken
    counts from its wake); None when nothing tells (then it is not idle)."""
    agents = presence.agents.idle_since() if presence.agents.sessions else 0
    return max(agents or 0, presence.tmux_changed, booted_at or 0) or None


def sleep_for(
    policy: IdlePolicy | None,
    presence: GuestPresence | None,
    *,
    booted_at: float | None,
    suspends: bool,
    unremovable: tuple[str, ...] = (),
) -> Sleep | None:
    """How ``policy`` puts the VM to sleep now, or None while it is in use (or not seen).
    ``suspends``: its backend can hibernate it (Proxmox) rather than only stop it.
    ``unremovable``: what a hibernation would save that sand cannot remove first
    (:func:`sand.plan.saved.unremovable`): without ``keepMemory`` it is never saved."""
    if policy is None or presence is None:
        return None
    if not presence.agents.known:
        return None  # a file not read whole, a Codex session: unknown is never idle
    if any(s.state == "working" for s in presence.agents.sessions):
        return None
    if presence.tmux_clients or presence.ssh_sessions:
        return None
    used = last_use(presence, booted_at)
    idle_for = presence.now - used if used is not None else 0
    if used is None or idle_for < policy.after:
        return None
    waiting = any(s.state == "needs-input" for s in presence.agents.sessions)
    how = SUSPENDED if suspends and policy.then == "suspend" else STOPPED
    if how == STOPPED and waiting and not policy.stop_waiting:
        # An agent waiting for a person keeps its question only in memory: suspend
        # keeps it; a stop would lose it. Where the backend cannot suspend, stay up.
        if not suspends:
            return None
        how = SUSPENDED
    held: tuple[str, ...] = ()
    if how == SUSPENDED and unremovable and not policy.keep_memory:
        # The default never writes a secret to storage: a stop instead, unless that
        # loses an agent's open question (then the VM stays up, as on Lima).
        if waiting and not policy.stop_waiting:
            return None
        how, held = STOPPED, unremovable
    said = "an agent waits for input" if waiting else "no agent working"
    why = f"idle {span(idle_for)}: {said}, no shell attached"
    kept = unremovable if how == SUSPENDED else ()
    return Sleep(how, int(idle_for), why, kept=kept, held=held)


def asleep_of(observed: ObservedVM | None, recorded: Asleep | None) -> Asleep | None:
    """Whether ``observed`` is asleep rather than stopped: put to sleep by sand (the
    mark it left on the VM, which every host reads; else this host's record, for this
    very VM), or hibernated (PVE's lock says so on the VM itself)."""
    if observed is None:
        return None
    mark = observed.slept
    if mark is not None and observed.power != "running" and mark.how in SLEEP_WAYS:
        if mark.how == SUSPENDED and not observed.hibernated:
            return None  # resumed and stopped since (by hand): not a sleep any more
        return Asleep(mark.how, float(mark.since), mark.by, observed.identity)
    if recorded is not None and recorded.identity != observed.identity:
        recorded = None  # another VM of that name since: the record is not about it
    if observed.hibernated and observed.power != "running":
        return recorded or Asleep(SUSPENDED)
    if recorded is not None and observed.power == "stopped" and recorded.how == STOPPED:
        return recorded
    return None


def saved_or_stopped(how: str, left: tuple[str, ...], policy: IdlePolicy | None) -> str:
    """How a VM sleeps once its guest said what its memory still holds after the scrub
    (:mod:`sand.provision.memory`): a hibernation saves it only when nothing is left or
    the policy's ``keepMemory`` allows it; otherwise the VM is stopped, as the plan
    would have said had it known."""
    if how == SUSPENDED and left and not (policy is not None and policy.keep_memory):
        return STOPPED
    return how


def unknown_use(policy: IdlePolicy | None, presence: GuestPresence | None) -> str | None:
    """Why a VM with an idle policy whose guest answered is not put to sleep though it
    may be idle: what its agents do is not known (None: it is known, or no policy)."""
    if policy is None or presence is None or presence.agents.known:
        return None
    return (
        f"what its agents do is unknown ({presence.agents.unknown_why()}); sand puts to sleep "
        "only a guest it saw unused"
    )
