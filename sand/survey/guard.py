"""The unpushed-work guard: nothing that holds a person's work is deleted by surprise.

A coding agent's VM holds commits that exist nowhere else until they are pushed.
Before a managed VM is deleted or replaced, its checkouts are swept with the same
read-only script as ``sand land`` (the manifest's repos plus a bounded ``find``):
commits on no remote branch, changed or untracked files, stashes. A VM with any
such work is blocked, with a line per checkout, unless its ``preserve:`` paths
cover every one (they are copied into the replacement) or the run says
``--allow-data-loss``. A VM that cannot be reached — stopped, no address, SSH
refused — cannot be shown to be empty, so it is treated as holding work.

The sweep runs twice: at plan time, so the plan shows the block, and again right
before the destroying call, because an agent may commit in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sand.backends.protocol import Backend
from sand.defaults import GUEST_SSH_PATIENCE, GUEST_SSH_TRY
from sand.desired import DesiredVM
from sand.errors import ErrorLayer, SandError
from sand.guest.runner import SshRunner
from sand.guest.sweep import sweep
from sand.observed import ObservedVM
from sand.plan.gates import Key, key_of, with_blockers, with_preserved_work
from sand.plan.model import Action, Blocker, Plan, VMChange
from sand.project import Session

AGENT_WAIT = 15.0  # how long to wait for a Proxmox guest agent to report an address
SWEEPS_AT_ONCE = 8
ALLOW_FLAG = "--allow-data-loss"

if TYPE_CHECKING:
    from sand.guest.sweep import Sweep


class DataLossRefused(SandError):
    """A delete or replace was stopped because the VM holds work nowhere else."""

    layer = ErrorLayer.GUARD


@dataclass(frozen=True)
class Verdict:
    """What the sweep of one VM found."""

    reachable: bool
    why: str = ""  # why it could not be swept
    holding: tuple[str, ...] = ()  # checkouts with work that would be lost
    kept: tuple[str, ...] = ()  # checkouts with work its preserve: paths keep

    @property
    def safe(self) -> bool:
        return self.reachable and not self.holding

    def blocker(self, vm: str) -> Blocker:
        if not self.reachable:
            return Blocker(
                f"could not be swept for unpushed work ({self.why}); a VM sand cannot look "
                f"into is treated as holding work: start it, or pass {ALLOW_FLAG}",
                kind="data",
            )
        return Blocker(
            f"holds work that exists nowhere else; push it, list the paths under "
            f"preserve:, or pass {ALLOW_FLAG}",
            kind="data",
            details=self.holding,
        )


async def judge(
    backend: Backend, vm: DesiredVM | None, observed: ObservedVM, preserve: Sequence[str] = ()
) -> Verdict:
    """Sweep one VM's checkouts and sort its work into lost and kept. A pool's spare
    holds no work (nothing per VM was ever put on it): it is not swept."""
    if observed.marker is not None and observed.marker.pool:
        return Verdict(True)
    if observed.power != "running":
        return Verdict(False, f"it is {observed.power}")
    try:
        found = await _sweep(backend, vm, observed)
    except SandError as exc:
        return Verdict(False, _short(str(exc)))
    home = found.home.rstrip("/")
    holding: list[str] = []
    kept: list[str] = []
    for checkout in found.checkouts:
        if not checkout.holds_work:
            continue
        line = f"{found.display_path(checkout)} ({checkout.work_summary()})"
        (kept if _covered(checkout.path, home, preserve) else holding).append(line)
    if found.truncated:
        holding.append("(more checkouts than the sweep reads: the rest were not looked at)")
    return Verdict(True, holding=tuple(holding), kept=tuple(kept))


async def guard_plan(plan: Plan, session: Session, *, allow_data_loss: bool) -> Plan:
    """Block every planned delete or replace of a VM that holds unpreserved work."""
    if allow_data_loss:
        return plan
    targets = [
        c
        for c in plan.changes
        if c.action in (Action.DELETE, Action.REPLACE) and c.observed is not None
    ]
    if not targets:
        return plan
    gate = asyncio.Semaphore(SWEEPS_AT_ONCE)

    async def one(change: VMChange) -> tuple[Key, Verdict]:
        assert change.observed is not None
        async with gate:
            # Only a replacement carries preserve: paths over; a delete (an expired VM
            # still has its manifest entry) keeps nothing.
            kept = change.desired.preserve if change.desired else ()
            verdict = await judge(
                session.backends[change.backend],
                change.desired,
                change.observed,
                kept if change.action is Action.REPLACE else (),
            )
        return key_of(change), verdict

    verdicts = dict(await asyncio.gather(*(one(c) for c in targets)))
    blockers = {k: (v.blocker(k[1]),) for k, v in verdicts.items() if not v.safe}
    kept = {k: v.kept for k, v in verdicts.items() if v.kept}
    return with_blockers(with_preserved_work(plan, kept), blockers)


async def refuse_if_holding(
    backend: Backend, vm: DesiredVM | None, observed: ObservedVM, preserve: Sequence[str] = ()
) -> None:
    """The last look before a destroying call; raises DataLossRefused."""
    verdict = await judge(backend, vm, observed, preserve)
    if not verdict.safe:
        blocker = verdict.blocker(observed.name)
        detail = "".join(f"\n    {line}" for line in blocker.details)
        raise DataLossRefused(f"{observed.name} was not deleted: {blocker.reason}{detail}")


async def _sweep(backend: Backend, vm: DesiredVM | None, observed: ObservedVM) -> Sweep:
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import connect, where

    endpoint = await backend.endpoint(vm, observed, wait=AGENT_WAIT)
    paths = [r.path for r in vm.repos] if vm is not None else []
    # As patient as sand shell: a guest a person can reach is never called unreachable.
    async with connect(
        endpoint, deadline=GUEST_SSH_PATIENCE, attempt_timeout=GUEST_SSH_TRY
    ) as conn:
        return await sweep(SshRunner(conn, "unpushed-work sweep", where=where(endpoint)), paths)


def _covered(path: str, home: str, preserve: Sequence[str]) -> bool:
    for kept in preserve:
        root = home if kept == "~" else home + "/" + kept[2:].rstrip("/")
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no answer"
    return line[:200]
