"""`sand status`: desired vs observed per VM, with Argo/kstatus-style conditions.

A backend that could not be observed makes its VMs *unknown*, never absent: a
person reading "absent" would believe the machine (and the work in it) is gone.
Their conditions are "Unknown" (not False), the report names each such backend
with its reason, and the command exits 1.

No guest is contacted unless ``deep``: then Healthy also needs the guest's own
checks (:mod:`sand.survey.health`) to pass, and each row's ``guest_health`` lists
what failed (``None``: not checked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sand import asyncrun
from sand.agentstate import AgentReport
from sand.backends.protocol import Backend
from sand.errors import SandError
from sand.plan.model import Action, Plan, VMChange
from sand.project import Session, open_session
from sand.state.records import load_records
from sand.survey.guest_secrets import GuestSecrets
from sand.survey.health import DEEP_TIMEOUT, Findings, check_health, targets
from sand.survey.plan import compute_plan

UNKNOWN = "Unknown"
# Bumped only when a key is removed or changes meaning (sand/schemas/status.schema.json).
STATUS_FORMAT_VERSION = "2"


@dataclass
class StatusRow:
    """One VM of ``sand status``: desired vs observed, with its conditions. ``desired``,
    ``observed`` and ``conditions`` are the JSON document's own objects (their keys are
    described by sand/schemas/status.schema.json and docs/output.md)."""

    vm: str
    backend: str
    identity: str | None
    action: str
    reasons: list[str]
    desired: dict[str, Any] | None
    observed: dict[str, Any] | None
    conditions: dict[str, Any]
    drift: list[str]
    guest_health: list[str] | None  # --deep's findings; None: not checked
    last_reconcile: Any  # the last apply's record, as stored (None: never applied)
    last_error: Any
    # What the guest's agents reported (:mod:`sand.agentstate`); None: not read. The
    # board sets it on each refresh (:class:`sand.survey.agentread.AgentReader`).
    agents: AgentReport | None = None
    # Whether the row was a target of the agents' read: a VM of the plan is (its JSON
    # row says "agents", null when nothing was read); a VM only recorded on a backend
    # nobody could observe is not, and its JSON row has no "agents" key at all.
    agents_read: bool = False
    # Only on a VM asleep (idle, or `sand sleep`): how, since, by whom.
    asleep: dict[str, Any] | None = None
    # Only on a pool's spare that a new VM of the plan claims: that VM. The row reads the
    # spare as it is now (running, healthy); its action is the slot's refill.
    claimed_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "vm": self.vm,
            "backend": self.backend,
            "identity": self.identity,
            "action": self.action,
            "reasons": self.reasons,
            "desired": self.desired,
            "observed": self.observed,
            "conditions": self.conditions,
            "drift": self.drift,
            "guest_health": self.guest_health,
            "last_reconcile": self.last_reconcile,
            "last_error": self.last_error,
        }
        if self.asleep is not None:  # only then: every other row reads as it always has
            row["asleep"] = self.asleep
        if self.claimed_by is not None:  # likewise
            row["claimed_by"] = self.claimed_by
        if self.agents_read:
            row["agents"] = self.agents.to_json() if self.agents is not None else None
        return row


@dataclass(frozen=True)
class StatusReport:
    rows: list[StatusRow]
    unknown_backends: dict[str, str] = field(default_factory=dict)
    # Per backend, its one-writer lease as stored (``LeaseRecord.to_status``): who
    # holds it now, or who last applied. Backends whose lease was never taken: none.
    leases: list[dict[str, Any]] = field(default_factory=list)
    # What the plan it was read from warns of (a copy left alone, secrets not compared).
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": STATUS_FORMAT_VERSION,
            "vms": [r.to_json() for r in self.rows],
            "unknown_backends": [
                {"backend": b, "reason": why} for b, why in sorted(self.unknown_backends.items())
            ],
            "leases": self.leases,
            "warnings": self.warnings,
        }


def status_report(
    manifest: str | Path, *, deep: bool = False, timeout: float | None = None
) -> StatusReport:
    session = open_session(manifest, lock=False)

    async def run() -> tuple[Plan, dict[str, Findings], list[dict[str, Any]]]:
        try:
            plan = await status_plan(session)
            leases = await _leases(session.backends, plan)
            if not deep:
                return plan, {}, leases
            todo = targets(plan, session.backends)
            return plan, await check_health(todo, timeout=timeout or DEEP_TIMEOUT), leases
        finally:
            await session.close()

    plan, health, leases = asyncrun.run(run())
    return status_from(plan, load_records(session.project), health, leases)


async def status_plan(session: Session) -> Plan:
    """The plan a status is read from: one listing per backend, as ``sand plan``'s no-op,
    with no preflight, no unpushed-work sweep and no guest contacted (read-only views:
    ``sand status``, the board of ``sand ui``)."""
    # A secret that cannot be read now must not hide the fleet: its VMs are shown with
    # their secrets not compared, and the plan's warnings say which and why.
    secrets = GuestSecrets(session, lenient=True)
    plan = await compute_plan(session, checks=False, guest_checks=False, secrets=secrets)
    skipped = tuple(secrets.not_compared(session.desired))
    return replace(plan, warnings=plan.warnings + skipped) if skipped else plan


def status_from(
    plan: Plan,
    records: dict[str, Any],
    health: dict[str, Findings] | None = None,
    leases: list[dict[str, Any]] | None = None,
) -> StatusReport:
    """One row per VM of ``plan`` (and per VM last recorded on a backend nobody could
    observe), with its conditions; ``records``: the last apply's results
    (:func:`sand.state.records.load_records`); ``health``: ``--deep``'s findings;
    ``leases``: each backend's one-writer lease as stored."""
    health = health or {}
    unknown = dict(plan.unknown_backends)
    claimers = claimers_of(plan)
    rows = []
    for c in plan.changes:
        claimer = claimers.get((c.backend, c.vm))
        if claimer is not None and claimer.claim is not None and c.observed is None:
            # The plan's change under a claimed spare's name is its slot's refill (a
            # create), but the machine under that name now is the spare, up and ready
            # until the claim renames it: the row shows that machine, not "absent".
            c = replace(c, observed=claimer.claim, identity=claimer.claim.identity)
        row = _row(c, records.get(c.vm, {}), unknown.get(c.backend), health.get(c.vm))
        by = claimer.vm if claimer is not None else None
        rows.append(replace(row, agents_read=True, claimed_by=by))
    rows += _recorded_but_unseen(plan, records, unknown)
    return StatusReport(rows, unknown, leases or [], list(plan.warnings))


def claimers_of(plan: Plan) -> dict[tuple[str, str], VMChange]:
    """(backend, spare) -> the change of the new VM that claims that spare in ``plan``."""
    return {(c.backend, c.claims): c for c in plan.changes if c.claims is not None}


def _agents(found: Findings | None) -> AgentReport | None:
    """What the deep check read of the guest's agents (:mod:`sand.agentstate`)."""
    return found.agents if found is not None else None


async def _leases(backends: Mapping[str, Backend], plan: Plan) -> list[dict[str, Any]]:
    """Each observable backend's lease record (read-only; one read each)."""
    names = sorted(n for n in backends if n not in plan.unknown_backends)

    async def one(name: str) -> dict[str, Any] | None:
        try:
            record = await backends[name].lease_record()
        except SandError:
            return None  # the lease is a courtesy here: the VMs are what status is for
        return record.to_status(name) if record is not None else None

    found = await asyncio.gather(*(one(n) for n in names))
    return [f for f in found if f is not None]


def _row(
    c: VMChange,
    record: dict[str, Any],
    backend_unknown: str | None,
    guest_health: Findings | None = None,
) -> StatusRow:
    d, o = c.desired, c.observed
    observed: dict[str, Any] | None
    conditions: dict[str, Any]
    if o is None and backend_unknown is not None:
        # Not seen because nobody could look: unknown, whatever the listing said.
        observed = {"power": "unknown", "reason": backend_unknown}
        conditions = {
            "Synced": UNKNOWN,
            "Healthy": UNKNOWN,
            "Provisioned": UNKNOWN if d is None or d.provision else "n/a",
        }
    else:
        observed = (
            None
            if o is None
            else {"power": o.power, "cpus": o.cpus, "memory": o.memory, "disk": o.disk}
        )
        provisioned: bool | str = "n/a"
        if d is not None and d.provision:
            provisioned = bool(o and o.marker and o.marker.guest_fingerprint == d.guest_fingerprint)
        # Asleep (idle, or `sand sleep`) is the VM's declared state resting: not drift,
        # and `state: running` not violated.
        power = d.state if c.asleep is not None and d is not None else (o.power if o else None)
        if observed is not None and c.asleep is not None:
            observed["power"] = c.asleep.how
        conditions = {
            "Synced": c.action is Action.NOOP and not c.acts and not c.drift,
            "Healthy": bool(o and d and power == d.state and not o.findings and not guest_health),
            "Provisioned": provisioned,
        }
    return StatusRow(
        vm=c.vm,
        backend=c.backend,
        identity=c.identity,
        action=c.verb,
        reasons=list(c.reasons),
        desired=None
        if d is None
        else {
            "state": d.state,
            "cpus": d.cpus,
            "memory": d.memory,
            "disk": d.disk,
            "image": d.image,
            # names only: which secrets sit at which scope, never values
            "secret_scopes": [{"name": s.name, "scope": s.scope} for s in d.secrets],
            # and those the broker holds for it, by their rules (as plan --json shows them)
            "brokered": [g.as_data() for g in d.brokered],
        },
        observed=observed,
        conditions=conditions,
        drift=[f.field for f in c.drift],
        guest_health=guest_health,
        last_reconcile=record.get("at"),
        last_error=record.get("error") or None,
        agents=_agents(guest_health),
        # only then: every other row reads as it always has
        asleep=None
        if c.asleep is None
        else {"how": c.asleep.how, "since": c.asleep.since_utc(), "by": c.asleep.by},
    )


def _recorded_but_unseen(
    plan: Plan, records: dict[str, Any], unknown: dict[str, str]
) -> list[StatusRow]:
    """VMs sand last recorded on an unobservable backend that the manifest no longer
    names: they may still exist (nothing could prune them), so they are listed too."""
    listed = {(c.backend, c.vm) for c in plan.changes}
    rows: list[StatusRow] = []
    for vm, record in sorted(records.items()):
        backend = record.get("backend") if isinstance(record, dict) else None
        if backend not in unknown or (backend, vm) in listed:
            continue
        if record.get("action") == Action.DELETE.value and record.get("ok"):
            continue  # sand saw it deleted
        change = VMChange(
            vm=vm,
            backend=backend,
            action=Action.BLOCKED,
            reasons=(f"backend unknown: {unknown[backend]}",),
        )
        rows.append(_row(change, record, unknown[backend]))
    return rows
