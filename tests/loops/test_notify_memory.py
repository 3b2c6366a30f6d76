"""What the notifier remembers stays as small as the fleet's sessions, however many
reads and however much churn (new sessions, VMs coming and going); and forgetting never
makes it tell again what it told."""

from __future__ import annotations

from sand.agentstate import AgentReport, AgentSession
from sand.loops.notify import Notifier
from sand.manifest.notify import Notify

SESSIONS = 3  # per VM per read
FLEET = 10  # VMs in each read


def report(*sessions: tuple[str, str]) -> AgentReport:
    return AgentReport(tuple(AgentSession("claude", s, state, 1, "/w") for s, state in sessions))


def test_the_memory_stays_bounded_by_the_fleet_after_many_reads_with_churn() -> None:
    notifier = Notifier(Notify(debounce=0))
    states = ("working", "needs-input", "done")
    for n in range(3000):
        # Each read: ten VMs of a fleet that drifts (one VM leaves, one comes, every
        # 10 reads), each with three sessions, new ids every read.
        vms = [f"vm-{n // 10 + i}" for i in range(FLEET)]
        reports = {
            vm: report(*((f"{vm}-s{n}-{k}", states[(n + k) % 3]) for k in range(SESSIONS)))
            for vm in vms
        }
        notifier.seen(reports)
    assert len(notifier.told) <= FLEET * SESSIONS
    assert len(notifier.first_seen) <= FLEET * SESSIONS


def test_a_vm_whose_read_failed_keeps_what_was_told_and_a_vm_of_the_fleet_too() -> None:
    notifier = Notifier(Notify(debounce=0))
    notifier.seen({"dev-1": report(), "dev-2": report()})  # the first read
    told = notifier.seen({"dev-1": report(("a", "done")), "dev-2": report(("b", "done"))})
    assert [(t.vm, t.session) for t in told] == [("dev-1", "a"), ("dev-2", "b")]
    # dev-1's file could not be read; dev-2 was not read at all (asleep), but is in the
    # manifest: neither is news when seen again as it was.
    unreadable = AgentReport(problem="agent state file is not JSON: not read")
    assert notifier.seen({"dev-1": unreadable}, fleet=["dev-1", "dev-2"]) == []
    again = {"dev-1": report(("a", "done")), "dev-2": report(("b", "done"))}
    assert notifier.seen(again, fleet=["dev-1", "dev-2"]) == []
    # dev-2 left the manifest and the reads: forgotten.
    notifier.seen({"dev-1": report(("a", "done"))}, fleet=["dev-1"])
    assert {key[0] for key in notifier.told} == {"dev-1"}
