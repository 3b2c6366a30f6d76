"""Settle what a crashed run left half-done, and show it in the plan first.

Each unfinished journal entry is asked of its backend as a read-only *decision*
(``decide_recovery``: what replaying it does, from what the backend shows now).
``sand plan`` folds the decisions into the plan (a VM a recovery deletes is planned
as absent) and lists them before the changes; ``apply`` replays them (decide, wait
for what the killed run left running, act), settles each entry, and then plans, so
the two agree. Only the replay settles journal entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sand.apply.recorded import check_recorded
from sand.backends.protocol import Backend, RecoveryAction, RecoveryDecision
from sand.errors import SandError
from sand.logs import get_logger
from sand.observed import Observation, ObservedVM
from sand.state.journal import Journal, PendingEntry


@dataclass
class Recovery:
    done: list[str] = field(default_factory=list)
    # Backends whose unfinished work could not be settled: planning on them now
    # could duplicate a half-made VM, so they are treated as unknown this run.
    failed: dict[str, str] = field(default_factory=dict)
    decisions: list[RecoveryDecision] = field(default_factory=list)


def _what(entry: PendingEntry) -> str:
    return f"{entry.op} of {entry.vm} ({entry.backend})"


async def replay_journal(journal: Journal, backends: Mapping[str, Backend]) -> Recovery:
    """Decide and act on each backend's unfinished entries, oldest first; settle each."""
    log = get_logger()
    out = Recovery()
    # A replace is made of backend operations with entries of their own: settle those
    # first (a half-made clone is removed or adopted), then the replace around them.
    pending = sorted(journal.pending(), key=lambda e: e.op == "replace")
    for entry in pending:
        name = entry.backend
        backend = backends.get(name)
        if backend is None or name in out.failed:
            # A backend that left the manifest keeps its entries until it comes back.
            continue
        try:
            if entry.op == "replace":
                from sand.apply.replace import act_replace, decide_replace

                decision = await decide_replace(entry, backend)
                how = await act_replace(entry, backend, journal, decision)
            else:
                decision = await backend.decide_recovery(entry, wait=True)
                how = await backend.act_recovery(entry, decision)
        except SandError as exc:
            out.failed[name] = f"could not settle the interrupted {_what(entry)}: {exc}"
            log.error("recovery failed", vm=entry.vm, op=entry.op, error=str(exc))
            continue
        journal.settle(entry.id, decision.action.value)
        log.info("recovered", vm=entry.vm, op=entry.op, outcome=how)
        out.decisions.append(decision)
        out.done.append(f"{_what(entry)}: {how}")
    return out


async def pending_decisions(
    journal: Journal, backends: Mapping[str, Backend], *, skip: Sequence[str] = ()
) -> Recovery:
    """What replaying the journal would do now, without doing it (nothing waits)."""
    out = Recovery()
    # As the replay does: the backend's own entries first, then each replace around them,
    # told which VMs those entries remove (the old VM whose delete was cut short).
    for entry in sorted(journal.pending(), key=lambda e: e.op == "replace"):
        name = entry.backend
        backend = backends.get(name)
        if backend is None or name in skip or name in out.failed:
            continue
        try:
            if entry.op == "replace":
                from sand.apply.replace import decide_replace

                going = frozenset(d.identity for d in out.decisions if _removes(d, name))
                out.decisions.append(await decide_replace(entry, backend, going))
            else:
                out.decisions.append(await backend.decide_recovery(entry, wait=False))
        except SandError as exc:
            out.failed[name] = f"cannot tell what the interrupted {_what(entry)} left: {exc}"
    return out


def _removes(decision: RecoveryDecision, backend: str) -> bool:
    """Whether replaying ``decision`` leaves no VM at its identity on ``backend``."""
    if decision.backend != backend or decision.op == "replace":
        return False
    return decision.absent or (decision.op == "delete" and decision.action is RecoveryAction.WAIT)


def fold_recovery(
    observations: Mapping[str, Observation], decisions: Sequence[RecoveryDecision]
) -> dict[str, Observation]:
    """The observations as they will be once the decisions are carried out: a VM a
    recovery removes is absent; an adopted one, or one left alone, stays as seen."""
    gone: dict[str, set[str]] = {}
    renamed: dict[tuple[str, str], str] = {}
    for d in decisions:
        if d.absent:
            gone.setdefault(d.backend, set()).add(d.identity)
        elif d.renamed_to:
            renamed[(d.backend, d.identity)] = d.renamed_to
    out = dict(observations)
    for (backend, identity), name in renamed.items():
        obs = out.get(backend)
        if obs is not None:
            out[backend] = replace(obs, vms=tuple(_renamed(v, identity, name) for v in obs.vms))
    for backend, identities in gone.items():
        obs = out.get(backend)
        if obs is None or (obs.unknown_reason and not obs.unknown_because):
            continue
        vms = tuple(v for v in obs.vms if v.identity not in identities)
        bases = tuple(b for b in obs.bases if b.identity not in identities)
        if obs.unknown_reason and set(obs.unknown_because) <= identities:
            # What made the listing untrusted (a half-copied instance) is what recovery
            # removes first.
            obs = replace(obs, unknown_reason=None, unknown_because=())
        out[backend] = replace(obs, vms=vms, bases=bases)
    return out


def _renamed(vm: ObservedVM, identity: str, name: str) -> ObservedVM:
    if vm.identity != identity:
        return vm
    marker = replace(vm.marker, name=name) if vm.marker is not None else None
    return replace(vm, name=name, marker=marker)


def trusted_enough(obs: Observation) -> bool:
    """Whether the backend answered well enough to decide its journal entries."""
    return not obs.unknown_reason or bool(obs.unknown_because)


async def recovered_view(
    journal: Journal,
    project: str,
    backends: Mapping[str, Backend],
    observations: Mapping[str, Observation],
    *,
    skip: Mapping[str, str],
) -> tuple[dict[str, Observation], list[RecoveryDecision]]:
    """What planning may believe: the observations once the journal's open entries are
    replayed (``skip``: backends whose replay failed), and checked against the VMs this
    host recorded (a listing that forgot one of them is not believed)."""
    out = dict(observations)
    unreachable = [n for n, o in out.items() if not trusted_enough(o)]
    recovery = await pending_decisions(journal, backends, skip=[*skip, *unreachable])
    for name, why in recovery.failed.items():
        out[name] = Observation(backend=name, vms=(), unknown_reason=why)
    settling: dict[str, set[str]] = {}
    for d in recovery.decisions:
        settling.setdefault(d.backend, set()).add(d.identity)
    out = fold_recovery(out, recovery.decisions)
    out = await check_recorded(project, backends, out, settling=settling)
    return out, recovery.decisions
