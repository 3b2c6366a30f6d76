"""Crash recovery for Lima: decide what an unfinished journal entry leaves, then do it.

A ``limactl`` child (start, stop, clone, delete …) runs in its own session, so it
outlives a killed sand: in ``apply`` recovery first waits (bounded) until no limactl
process acts on the instance any more, and only then reads it and decides; ``sand
plan`` decides such an entry as WAIT. Identity comes first: the sidecar's ``uid`` (the
instance's incarnation) must be the one the entry recorded, so a replay never acts on
an instance someone made under the same name since.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from sand.backends.lima import fork, lifecycle, limayaml, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.marker import classify
from sand.backends.lima.observe import Inspected, inspect
from sand.backends.protocol import RecoveryAction, RecoveryDecision
from sand.errors import BackendError
from sand.manifest.backends.lima import RESERVED_PREFIX, LimaConfig
from sand.observed import Ownership
from sand.state.journal import PendingEntry

Say = Callable[..., RecoveryDecision]

# limactl subcommands that change an instance (not shell, list, hostagent …).
MUTATING = frozenset(
    {
        "start",
        "stop",
        "restart",
        "edit",
        "clone",
        "rename",
        "delete",
        "rm",
        "remove",
        "create",
        "protect",
        "unprotect",
        "factory-reset",
    }
)


def acting_on(ps_output: str, name: str) -> list[str]:
    """The limactl processes in ``ps -o pid=,args=`` output that act on ``name``."""
    found: list[str] = []
    for line in ps_output.splitlines():
        pid, _, args = line.strip().partition(" ")
        words = args.split()
        if not words:
            continue
        # limactl itself, or an interpreter (and its options) running a script of that name.
        at = 0
        if os.path.basename(words[0]).startswith("python"):
            at = 1
            while at < len(words) and words[at].startswith("-"):
                at += 1
        if at >= len(words) or os.path.basename(words[at]) != "limactl":
            continue
        operands = [w for w in words[at + 1 :] if not w.startswith("-")]
        named = [w.split("=", 1)[1] for w in words[at + 1 :] if w.startswith("--name=")]
        if operands and operands[0] in MUTATING and name in operands[1:] + named:
            found.append(f"limactl {operands[0]} (pid {pid})")
    return found


async def in_flight(ctx: Ctx, name: str) -> list[str]:
    res = await ctx.runner.run(scripts.processes_argv(), timeout=30)
    return acting_on(res.stdout.decode(errors="replace"), name) if res.ok else []


async def wait_until_idle(ctx: Ctx, name: str) -> None:
    """Wait (bounded) until no limactl process acts on ``name``; else raise (transient)."""
    deadline = time.monotonic() + ctx.timeouts.recovery_wait
    delay = 0.1
    while True:
        busy = await in_flight(ctx, name)
        if not busy:
            return
        if time.monotonic() + delay > deadline:
            raise BackendError(
                f"{', '.join(busy)} still acts on {name} on {ctx.runner.where} after "
                f"{ctx.timeouts.recovery_wait:.0f}s; the interrupted operation is settled next run",
                backend=ctx.name,
                transient=True,
            )
        await asyncio.sleep(delay)
        delay = min(1.0, delay * 2)


def _decision(
    ctx: Ctx,
    entry: PendingEntry,
    action: RecoveryAction,
    summary: str,
    *,
    absent: bool,
) -> RecoveryDecision:
    return RecoveryDecision(
        entry=entry.id,
        backend=ctx.name,
        vm=entry.vm,
        op=entry.op,
        identity=(entry.identity or entry.vm),
        action=action,
        summary=summary,
        absent=absent,
    )


def _uid_matches(entry: PendingEntry, found: Inspected) -> bool:
    """The instance's sidecar is the incarnation the entry recorded (or the entry is
    from before incarnations were journalled)."""
    if "uid" not in entry.details or found.sidecar is None:
        return True
    return str(entry.detail("uid") or "") == found.sidecar.uid


async def decide(ctx: Ctx, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
    op = entry.op
    name = entry.identity or entry.vm
    is_base = name.startswith(RESERVED_PREFIX)

    def say(action: RecoveryAction, summary: str, *, absent: bool = False) -> RecoveryDecision:
        return _decision(ctx, entry, action, summary, absent=absent)

    if not is_base and LimaConfig.name_problem(name) is not None:
        return say(RecoveryAction.NOTHING, f"nothing to do: {name!r} is not a Lima instance name")
    if wait:
        await wait_until_idle(ctx, name)
    else:
        busy = await in_flight(ctx, name)
        if busy:
            return say(
                RecoveryAction.WAIT,
                f"wait for {', '.join(busy)} the interrupted {op} left running, then settle it",
            )
    if op == "rename":
        return await _decide_rename(ctx, entry, say)
    if op == fork.OP:  # a fork's source, stopped for the copy
        return say(*await fork.decide_fork_stop(ctx, entry))
    found = (await inspect(ctx, name))[name]
    inst = found.instance
    if op == "create":
        return _decide_create(ctx, entry, found, say)
    if op in ("delete", "base-delete"):
        if inst is None:
            return say(RecoveryAction.NOTHING, f"{name} is already deleted", absent=True)
        if not _uid_matches(entry, found):
            return say(
                RecoveryAction.MOOT,
                f"{name} is still there but is not the instance the delete was for (another "
                "incarnation); left alone",
            )
        if not inst.readable:
            return say(RecoveryAction.DELETE, f"finish removing {name}", absent=True)
        return say(
            RecoveryAction.NOTHING, f"{name} is still there; the next plan decides what to do"
        )
    if op == "base":
        if inst is None:
            return say(RecoveryAction.NOTHING, f"nothing to undo: base {name} was never created")
        if found.base_stamp is not None and found.base_stamp.project == ctx.project:
            return say(RecoveryAction.ADOPT, f"base {name} is complete")
        if not inst.readable or inst.param.get(limayaml.PARAM_PROJECT) == ctx.project:
            return say(RecoveryAction.DELETE, f"remove the half-built base {name}", absent=True)
        return say(RecoveryAction.MOOT, f"left {name} alone: it was not made by this project")
    if inst is not None and not _uid_matches(entry, found):
        return say(
            RecoveryAction.MOOT,
            f"the interrupted {op} of {name} is moot: the instance is another incarnation; "
            "left alone",
        )
    return say(
        RecoveryAction.NOTHING,
        f"nothing to undo for {op} of {name}: what it started has ended; the plan re-reads it",
    )


def _decide_create(
    ctx: Ctx, entry: PendingEntry, found: Inspected, decide_as: Say
) -> RecoveryDecision:
    name = entry.identity or entry.vm
    inst = found.instance
    if inst is None:
        return decide_as(
            RecoveryAction.NOTHING, f"nothing to undo: {name} was never created", absent=True
        )
    if fork.copied_marker(entry, found):
        return decide_as(
            RecoveryAction.DELETE,
            f"delete the half-made fork {name} (a copy its create never marked)",
            absent=True,
        )
    if not _uid_matches(entry, found):
        return decide_as(
            RecoveryAction.MOOT,
            f"left {name} alone: it carries another incarnation's marker (made since)",
        )
    if not inst.readable:
        return decide_as(
            RecoveryAction.DELETE, f"remove the half-copied directory of {name}", absent=True
        )
    c = classify(name, found.sidecar, inst.param, ctx.project, ctx.name)
    if c.ownership is Ownership.MANAGED and not c.incomplete:
        return decide_as(RecoveryAction.ADOPT, f"adopt {name}: it carries this project's marker")
    via = str(entry.detail("via") or "")
    kind, _, copied_from = via.partition(":")
    # A copy whose --set has not renamed its origin yet still names its base or source.
    from_base = kind in ("clone", "fork") and inst.param.get(limayaml.PARAM_INSTANCE) in (
        copied_from,
        name,
    )
    ours = found.sidecar is None and inst.param.get(limayaml.PARAM_PROJECT) == ctx.project
    if ours and (c.incomplete or from_base):
        if inst.protected:
            return decide_as(RecoveryAction.LEAVE, f"leave the half-made {name}: it is protected")
        return decide_as(
            RecoveryAction.DELETE,
            f"delete the half-made {name} (its create never finished)",
            absent=True,
        )
    return decide_as(
        RecoveryAction.MOOT, f"left {name} alone: it does not carry this project's marker"
    )


async def _decide_rename(ctx: Ctx, entry: PendingEntry, decide_as: Say) -> RecoveryDecision:
    """A rename a crash cut short: the files moved, the sidecar not yet rewritten (the
    instance then reads as a copy of the old name, which nothing touches)."""
    old, new = entry.identity, str(entry.detail("to") or "")
    if LimaConfig.name_problem(new) is not None:
        return decide_as(RecoveryAction.NOTHING, f"nothing to do: {new!r} is not an instance")
    found = await inspect(ctx, old, new)
    side = found[new].sidecar
    if found[new].instance is None:
        return decide_as(RecoveryAction.NOTHING, f"the rename of {old} to {new} did not happen")
    if side is None or side.marker.project != ctx.project or side.marker.identity != old:
        return decide_as(
            RecoveryAction.NOTHING, f"{new} does not carry the marker of {old}: left alone"
        )
    if found[old].instance is not None:
        return decide_as(RecoveryAction.MOOT, f"left {new} alone: {old} still exists")
    return decide_as(RecoveryAction.FINISH, f"finish renaming {old} to {new} (rewrite its marker)")


_PAST = {
    "delete the": "deleted the",
    "remove the": "removed the",
    "finish removing": "finished removing",
    "finish renaming": "finished renaming",
    "adopt ": "adopted ",
    "start ": "started ",
}


def _past(summary: str) -> str:
    for now, then in _PAST.items():
        if summary.startswith(now):
            return then + summary[len(now) :]
    return summary


async def act(ctx: Ctx, entry: PendingEntry, decision: RecoveryDecision) -> str:
    """Carry out a decision, re-reading the instance first (it must still qualify)."""
    if decision.action is RecoveryAction.FINISH and decision.op == "rename":
        again = await decide(ctx, entry, wait=False)
        if again.action is RecoveryAction.FINISH:
            await lifecycle.finish_rename(ctx, entry.identity, str(entry.detail("to")))
        return _past(again.summary)
    if decision.action is RecoveryAction.FINISH and decision.op == fork.OP:
        action, summary = await fork.decide_fork_stop(ctx, entry)
        if action is RecoveryAction.FINISH:
            await vmops.start(ctx, entry.identity)
        return _past(summary)
    if decision.action is not RecoveryAction.DELETE:
        return _past(decision.summary)
    name = decision.identity
    again = await decide(ctx, entry, wait=False)
    if again.action is not RecoveryAction.DELETE:
        return _past(again.summary)
    found = (await inspect(ctx, name))[name]
    inst = found.instance
    if inst is None:
        return f"{name} is already gone"
    await vmops.remove(ctx, name, readable=inst.readable)
    return _past(decision.summary)


async def vanished(ctx: Ctx, names: list[str]) -> dict[str, str | None]:
    """Recorded instances the listing left out, checked by their directories."""
    valid = [n for n in names if LimaConfig.name_problem(n) is None]
    out: dict[str, str | None] = {n: None for n in names if n not in valid}  # never made
    if valid:
        found = await inspect(ctx, *valid)
        for n in valid:
            out[n] = (
                None
                if found[n].instance is None
                else f"instance {n}, which sand made, is missing from the listing on "
                f"{ctx.runner.where} but its directory is there"
            )
    return out
