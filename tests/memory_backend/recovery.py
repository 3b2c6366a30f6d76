"""What the memory backend decides for an entry a killed run left open: from what the
world holds at the entry's identity now, as every backend decides (the protocol's
``Recovers``): a half-made VM removed, a marked one of this incarnation adopted,
another VM at that identity never touched."""

from __future__ import annotations

from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.state.journal import PendingEntry
from tests.memory_backend.world import MemVM


def decide(vm: MemVM | None, entry: PendingEntry, backend: str) -> RecoveryDecision:
    """``vm``: what the world holds at ``entry.identity`` now (None: nothing)."""

    def say(action: RecoveryAction, summary: str, absent: bool = False) -> RecoveryDecision:
        return RecoveryDecision(
            entry.id, backend, entry.vm, entry.op, entry.identity, action, summary, absent
        )

    if vm is None:
        return say(RecoveryAction.NOTHING, f"nothing of {entry.op} {entry.vm} is left")
    if entry.op not in ("create", "delete", "build-base"):
        # An update, rename, sleep or claim cut short: the plan sees the VM as it is.
        return say(RecoveryAction.NOTHING, f"{entry.vm} is as the plan sees it")
    if entry.op == "build-base":
        if vm.ready:
            return say(RecoveryAction.NOTHING, f"golden base {entry.vm} was finished")
        return say(RecoveryAction.DELETE, f"delete half-built base {entry.identity}", True)
    if vm.uid != entry.detail("uid"):
        return say(RecoveryAction.MOOT, f"{entry.identity} is another VM now: left alone")
    if entry.op == "delete":
        return say(RecoveryAction.DELETE, f"finish deleting {entry.vm}", True)
    if vm.marker is None:
        return say(RecoveryAction.DELETE, f"delete half-made {entry.identity}", True)
    return say(RecoveryAction.ADOPT, f"adopt {entry.vm} ({entry.identity})")
