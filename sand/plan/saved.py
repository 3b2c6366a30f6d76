"""What a VM's saved memory would hold: the plan's account before a hibernation.

A hibernation writes the guest's whole RAM to a state volume on the cluster's storage.
Before it, sand removes what it delivered (each secret's tmpfs file overwritten in
place, then removed; freed pages are zeroed by the guest's ``init_on_free=1``) and
delivers it again at wake. What it cannot remove from a running guest is what its
running programs hold: the secrets direnv exported into a session's environment, and
an agent's login in the agent's own memory. Pure: the facts are the VM's declared
secrets and who the guest said uses it (:class:`sand.agentstate.GuestPresence`); the
apply checks the guest itself again before it saves anything (``sand.provision.memory``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sand.desired import DesiredVM

if TYPE_CHECKING:  # a plan reads what the guests told; it starts without their parser
    from sand.agentstate import GuestPresence


def delivered(vm: DesiredVM) -> tuple[str, ...]:
    """The secrets sand delivers to ``vm``'s tmpfs, by name: removed before its memory is
    saved, delivered again when it wakes."""
    names = {s.name for s in vm.secrets} | {r.token_secret for r in vm.repos if r.token_secret}
    return tuple(sorted(names))


def unremovable(vm: DesiredVM, presence: GuestPresence | None) -> tuple[str, ...]:
    """What the guest's running programs hold that sand cannot take out of its memory.

    A session that runs (an agent's, or a tmux server's shells) may have entered a
    secret's scope, where direnv exported it into its environment: every scoped secret
    counts, as sand cannot read which did without reading the values. Each running
    agent holds its own login."""
    if presence is None:
        return ()
    agents = sorted({s.agent for s in presence.agents.sessions})
    running = bool(agents) or presence.tmux_changed > 0
    held = [f"secret {name} (a running session's environment)" for name in _scoped(vm)]
    if not running:
        held = []
    held += [f"{agent} login (its running session)" for agent in agents]
    return tuple(held)


def _scoped(vm: DesiredVM) -> list[str]:
    return sorted({s.name for s in vm.secrets})
