"""What a crashed run left half-done, as the plan shows it first.

Each unfinished journal entry is asked of its backend as a read-only *decision*
(``decide_recovery``: what replaying it does, from what the backend shows now).
``sand plan`` folds the decisions into the plan (a VM a recovery deletes is planned
as absent) and lists them before the changes; ``apply`` replays them
(``sand.apply.recovery``: decide, wait for what the killed run left running, act),
settles each entry, and then plans, so the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sand.backends.protocol import Backend, RecoveryAction, RecoveryDecision
from sand.errors import BackendError, SandError
from sand.observed import Observation, ObservedVM, Ownership
from sand.plan.model import Strategy
from sand.state.journal import Journal, PendingEntry
from sand.survey.recorded import check_recorded


@dataclass
class Recovery:
    done: list[str] = field(default_factory=list)
    # Backends whose unfinished work could not be settled: planning on them now
    # could duplicate a half-made VM, so they are treated as unknown this run.
    failed: dict[str, str] = field(default_factory=dict)
    decisions: list[RecoveryDecision] = field(default_factory=list)


def what_of(entry: PendingEntry) -> str:
    return f"{entry.op} of {entry.vm} ({entry.backend})"


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
                going = frozenset(d.identity for d in out.decisions if _removes(d, name))
                out.decisions.append(await decide_replace(entry, backend, going))
            else:
                out.decisions.append(await backend.decide_recovery(entry, wait=False))
        except SandError as exc:
            out.failed[name] = f"cannot tell what the interrupted {what_of(entry)} left: {exc}"
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


@dataclass(frozen=True)
class Standing:
    """What a backend shows of one create-before-destroy replace."""

    old_present: bool  # the very VM that was replaced (its identity and incarnation)
    made: ObservedVM | None  # the replacement, still under its temporary name


async def standing(entry: PendingEntry, backend: Backend, going: frozenset[str]) -> Standing:
    """Look at the backend: is the old VM still there (and not about to go), and is the
    replacement under its temporary name? ``going``: identities another unfinished entry
    (the old VM's own delete) removes before this one is settled."""
    temp = str(entry.detail("temp") or "")
    obs = await backend.observe([])
    if obs.unknown_reason:
        raise BackendError(f"cannot see the replacement {temp}: {obs.unknown_reason}")
    uid = str(entry.detail("old_uid") or "")
    incarnation = str(entry.detail("old_incarnation") or "")

    def is_old(vm: ObservedVM) -> bool:
        if vm.identity != entry.identity or vm.name == temp:
            return False
        if uid and vm.details.get("uid", "") != uid:
            return False  # Lima: a successor under the same instance name
        seen = vm.marker.incarnation if vm.marker is not None else ""
        return not (incarnation and seen and seen != incarnation)

    made = [o for o in obs.vms if o.name == temp and o.ownership is Ownership.MANAGED]
    old_present = entry.identity not in going and any(is_old(o) for o in obs.vms)
    return Standing(old_present=old_present, made=made[0] if made else None)


async def decide_replace(
    entry: PendingEntry, backend: Backend, going: frozenset[str] = frozenset()
) -> RecoveryDecision:
    """What settling a replace a crash interrupted does. A replace is settled as one unit
    and decided from what exists, never from its steps alone:

    - the old VM is still there (and no unfinished delete removes it): the replacement,
      whatever state it reached, is removed and the old VM left untouched; the next plan
      replaces again;
    - the old VM is gone or going: the replacement *is* the VM now (it holds the copy of
      the ``preserve:`` paths) and is kept and given the VM's name, never removed.

    Destroy-before-create: after the delete the next plan creates the VM again and
    restores the kept archive.
    """
    vm, temp = entry.vm, str(entry.detail("temp") or "")
    old = entry.identity
    steps = list(entry.steps or [])

    def say(
        action: RecoveryAction,
        summary: str,
        *,
        identity: str = old,
        absent: bool = False,
        renamed_to: str = "",
    ) -> RecoveryDecision:
        return RecoveryDecision(
            entry=entry.id,
            backend=backend.name,
            vm=vm,
            op="replace",
            identity=identity,
            action=action,
            summary=summary,
            absent=absent,
            renamed_to=renamed_to,
        )

    if entry.detail("strategy") == Strategy.DESTROY_BEFORE_CREATE.value or not temp:
        if "old-deleted" in steps:
            return say(RecoveryAction.NOTHING, f"the old VM {old} of {vm} was deleted; create it")
        return say(RecoveryAction.NOTHING, f"the replace of {vm} stopped before VM {old} went")
    now = await standing(entry, backend, going)
    if now.old_present:
        if now.made is None:
            return say(RecoveryAction.NOTHING, f"no replacement of {vm} was made; VM {old} stays")
        return say(
            RecoveryAction.DELETE,
            f"remove the unfinished replacement {temp} of {vm} (VM {old} is untouched)",
            identity=now.made.identity,
            absent=True,
        )
    if now.made is None:
        return say(RecoveryAction.NOTHING, f"the replacement of {vm} already carries its name")
    return say(
        RecoveryAction.FINISH,
        f"name the replacement {temp} {vm} (the old VM {old} is gone)",
        identity=now.made.identity,
        renamed_to=vm,
    )
