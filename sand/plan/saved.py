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
    """The secrets sand delivers to ``vm``'s tmpfs, by name (a brokered one: the VM's
    broker credential for it): removed before its memory is saved, delivered again when
    it wakes."""
    names = {s.name for s in vm.secrets} | {r.token_secret for r in vm.repos if r.token_secret}
    names |= {g.secret for g in vm.brokered}  # one its secrets: grant leaves no repo token
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


def fork_copy(vm: DesiredVM) -> tuple[str, ...]:
    """What a fork's copy of its source holds, as the plan says it: its source's disk
    (and with ``snapshot: memory`` its RAM, saved in the snapshot), less the agent logins
    its entry does not keep; its secrets are its own entry's, delivered to it."""
    assert vm.fork is not None
    source = vm.fork.source
    if not vm.provision:
        return (f"copied from {source}'s disk as it is, agent logins included (provision: false)",)
    kept = ", ".join(vm.fork.logins) or "none"
    said = [f"copied from {source}'s disk without its agent logins (from.logins keeps: {kept})"]
    names = delivered(vm)
    said.append(
        f"secrets: its own entry's, delivered to it: {', '.join(names)}"
        if names
        else "secrets: none (its own entry grants none)"
    )
    if vm.fork.memory:
        said.append(
            f"{source}'s memory is saved in the snapshot for the copy: its delivered secrets "
            "are removed first and delivered again after; while its memory holds what sand "
            "cannot remove (a running session's environment, an agent's login), the "
            "snapshot is taken without it"
        )
    return tuple(said)
