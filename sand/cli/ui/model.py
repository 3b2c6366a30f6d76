"""The board's rows, as plain data: what ``sand status`` computes, one row per VM, and
what the engine is doing to it while an apply runs. No terminal is needed to build or
test any of it; ``sand.cli.ui.app`` only draws these.

Every string that reaches the screen passes :func:`shown`: made inert (no terminal
control from a guest or a hand-edited state file) and redacted (every secret value
this process resolved), a safety net behind the rule that nothing puts a value there.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rich.style import Style
from rich.text import Text

from sand.agentstate import AgentReport
from sand.agentstate import cell as agent_cell
from sand.apply.events import Phase, StepEvent
from sand.desired.fork import FORK_PREFIX
from sand.plan.model import Plan, VMChange
from sand.redaction import redact
from sand.terminal import one_line

if TYPE_CHECKING:  # the survey loads the backends: the board imports it when it observes
    from sand.survey.status import StatusRow

# What changes while you watch comes first. When the terminal is too narrow for all of
# them (80 columns over SSH), the address, then the backend, then the age give way
# rather than push the rest behind a horizontal scroll: the detail pane has all three
# (and what gives way after them: sand.cli.ui.columns).
LAST_COLUMN = "LAST APPLY"  # also what an apply under way is doing to the VM
COLUMNS = (
    "VM", "SYNC", "HEALTH", "PROV", "POWER", "AGENT", "LAST APPLY", "AGE", "BACKEND", "ADDRESS",
)  # fmt: skip
GIVE_WAY = 3  # the last columns, dropped right to left when they do not fit


def shown(text: object, limit: int = 200) -> str:
    """``text`` fit for the board: one inert, redacted line of at most ``limit``."""
    return one_line(redact(str(text)), limit)


@dataclass(frozen=True)
class Activity:
    """What an apply under way is doing to one VM: its step (the engine's last event for
    it, and when that step began) and a retry within that step, counting down."""

    event: StepEvent
    began: float  # time.monotonic() when the step began: its own clock runs from here
    retry: StepEvent | None = None  # the last retry announced within the step
    retry_at: float = 0.0

    def text(self, now: float, room: int | None = None) -> str:
        """ "creating 3.2s", "waiting for the guest agent 45s / 300s — PVE 503, retry 2/5
        in 1.6s", "✓ done 14.0s": the step with its own clock (against its limit when it
        is a bounded wait); a final one with the time the VM's whole apply took. In a
        narrow ``room`` the step's words are cut, never its clock or its retry."""
        e = self.event
        words = shown(e.text, 80)
        if e.phase.final:
            mark = "✓" if e.phase is Phase.DONE else "✗"
            return _within(f"{mark} ", words, f" {e.elapsed:.1f}s", room)
        took = max(0.0, now - self.began)
        clock = f" {took:.0f}s / {e.limit:.0f}s" if e.limit else f" {took:.1f}s"
        r = self.retry.retry if self.retry is not None else None
        if r is not None:
            left = max(0.0, r.delay - (now - self.retry_at))
            of = f"/{r.attempts}" if r.attempts else ""
            clock += f" — {shown(r.reason, 60)}, retry {r.attempt}{of} in {left:.1f}s"
        said = _within("", words, clock, room)
        if room is not None and len(said) > room and e.limit and r is None:
            return _within("", words, f" {took:.0f}s", room)  # its limit is in the detail
        return said


def _within(head: str, words: str, tail: str, room: int | None) -> str:
    """``head + words + tail`` in ``room`` cells, the words cut (to no fewer than a few)."""
    if room is not None and len(head) + len(words) + len(tail) > room:
        keep = max(6, room - len(head) - len(tail) - 1)
        if keep < len(words):
            words = words[:keep].rstrip() + "…"
    return head + words + tail


def next_activity(before: Activity | None, event: StepEvent, now: float) -> Activity:
    """A VM's activity once ``event`` arrived: a retry belongs to the step under way; any
    other event is a new step, whose clock starts now."""
    if event.retry is not None and before is not None and not before.event.phase.final:
        return replace(before, retry=event, retry_at=now)
    if event.retry is not None:
        return Activity(event, now, retry=event, retry_at=now)
    return Activity(event, now)


@dataclass(frozen=True)
class BoardRow:
    """One VM as the board shows it: ``sand status``'s row, read for people."""

    vm: str
    backend: str
    sync: str  # Synced | OutOfSync | Unknown
    why: str  # what is out of sync, or why it is unknown ("" when Synced)
    health: str  # Healthy | Unhealthy | Unknown
    provisioned: str  # yes | no | n/a | Unknown
    power: str  # running | stopped | absent | unknown
    address: str
    created_at: float | None  # epoch seconds the VM was made (its marker), None: not known
    last_error: str  # the last apply's error for it ("" when it went well or none ran)
    last_ok: bool | None
    last_at: float | None  # when (epoch seconds)
    unobservable: bool  # its backend could not be observed this time
    # What its agents reported in the refresh's guest read (None: not read).
    agents: AgentReport | None = None
    # What it is made from or for (docs/fork-and-pools.md): the VM it is a fork of, the
    # pool it is a spare of, and a plan's pending claim ("claims spare S of pool P") or
    # refill ((slot, warm)) as the plan text says them.
    fork_of: str = ""
    spare_of: str = ""
    claims: str = ""
    claims_pool: str = ""
    refill: tuple[int, int] | None = None
    claimed_by: str = ""  # a spare the plan's claim takes: the new VM that claims it

    @property
    def role(self) -> str:
        """What the VM is besides a VM of the manifest, in short, for its VM cell: "fork
        of agent-1", "spare of pool agents", "claims agents-spare-1"; "" for any other VM
        (a refill's slot is in its SYNC cell)."""
        if self.spare_of:
            return f"spare of pool {self.spare_of}"
        if self.claims:
            return f"claims {self.claims}"
        return f"fork of {self.fork_of}" if self.fork_of else ""

    @property
    def role_whole(self) -> str:
        """The role as the plan text says it (:func:`sand.plan.render.render_change`),
        for the detail pane."""
        if self.spare_of and self.refill:
            claimed = f", claimed by {self.claimed_by}" if self.claimed_by else ""
            refill = f"(refill {self.refill[0]}/{self.refill[1]})"
            return f"spare of pool {self.spare_of}{claimed} {refill}"
        if self.claims:
            return f"claims spare {self.claims} of pool {self.claims_pool}"
        return self.role

    @property
    def named(self) -> str:
        """The VM cell: its name, and its role when it has one."""
        return f"{self.vm} · {self.role}" if self.role else self.vm

    def cells(
        self, now: float, activity: Activity | None = None, last_room: int | None = None
    ) -> tuple[str, ...]:
        """The table's cells; the sync reason and the last result in short (the detail
        pane has them whole), an apply's step within ``last_room`` cells."""
        sync = f"{self.sync} ({self.short_why})" if self.short_why else self.sync
        last = activity.text(time.monotonic(), last_room) if activity else self.last_short(now)
        cells = {
            "VM": self.named,
            "SYNC": sync,
            "HEALTH": self.health,
            "PROV": self.provisioned,
            "POWER": self.power,
            "AGENT": agent_cell(self.agents, now),
            "LAST APPLY": shown(last, last_room or 60),
            "AGE": age(self.created_at, now),
            "BACKEND": self.backend,
            "ADDRESS": self.address or "-",
        }
        return tuple(cells[c] for c in COLUMNS)

    @property
    def short_why(self) -> str:
        if self.unobservable:
            return "backend"
        if self.refill is not None and self.sync == "OutOfSync":
            return f"refill {self.refill[0]}/{self.refill[1]}"
        return self.why.split(";")[0].split(":")[0].strip()[:24] if self.why else ""

    def last_short(self, now: float) -> str:
        """ "ok 5m ago", "failed 2h ago"; "-" when no apply of it is recorded here."""
        if self.last_at is None:
            return "-"
        verdict = "ok" if self.last_ok else "failed"
        return f"{verdict} {age(self.last_at, now)} ago"

    def last_whole(self, now: float) -> str:
        """The last apply's result with its error, for the detail pane."""
        said = self.last_short(now)
        return f"{said}: {self.last_error}" if self.last_error else said

    def matches(self, text: str) -> bool:
        """The filter (``/``): every word appears somewhere in the row, any case."""
        agent = agent_cell(self.agents, 0).rsplit(" ", 1)[0] if self.agents else ""
        words = (self.vm, self.role_whole, self.backend, self.sync, self.why, self.power, agent)
        hay = " ".join(words).lower()
        return all(word in hay for word in text.lower().split())


def board_rows(report_rows: Sequence[StatusRow], plan: Plan) -> list[BoardRow]:
    """``sand status``'s rows (:func:`sand.survey.status.status_from`) for the board,
    each with what only the plan's observation holds (address, creation time)."""
    changes = {(c.backend, c.vm): c for c in plan.changes}  # one pass: a fleet is big
    rows = []
    for r in report_rows:
        claimer = changes.get((r.backend, r.claimed_by)) if r.claimed_by else None
        rows.append(_board_row(r, changes.get((r.backend, r.vm)), claimer))
    # A pool's spares are not the person's VMs: they come after them, together.
    return sorted(rows, key=lambda r: r.spare_of != "")


def _board_row(r: StatusRow, change: VMChange | None, claimer: VMChange | None = None) -> BoardRow:
    """``claimer``: on a spare a new VM claims, that VM's change, whose ``claim`` is the
    spare as it is now (the spare's own change is its slot's refill, made later)."""
    conditions = r.conditions
    observed = r.observed
    unknown = isinstance(observed, dict) and observed.get("power") == "unknown"
    o = change.observed if change is not None else None
    if claimer is not None and o is None:
        o = claimer.claim
    return BoardRow(
        vm=shown(r.vm, 64),
        backend=shown(r.backend, 32),
        sync=_sync(conditions.get("Synced")),
        why=_why(r, unknown),
        health=_condition(conditions.get("Healthy"), "Healthy", "Unhealthy"),
        provisioned=_condition(conditions.get("Provisioned"), "yes", "no"),
        power="absent" if observed is None else shown(observed.get("power", "?"), 16),
        address=shown(o.address, 48) if o is not None and o.address else "",
        created_at=float(o.marker.created_at) if o and o.marker and o.marker.created_at else None,
        last_error=shown(r.last_error or "", 300),
        last_ok=None if not r.last_reconcile else not r.last_error,
        last_at=_epoch(r.last_reconcile),
        unobservable=unknown,
        agents=r.agents,
        claimed_by=shown(r.claimed_by or "", 64),
        **_made_of(change),
    )


def _made_of(change: VMChange | None) -> dict[str, Any]:
    """The row's fork, pool and claim fields, as the plan text reads them
    (:func:`sand.plan.render.render_change`): from the manifest's entry, else (a VM it
    no longer declares) from the VM's own marker."""
    if change is None:
        return {}
    d, o = change.desired, change.observed
    marker = o.marker if o is not None else None
    fork_of = d.fork.source if d is not None and d.fork is not None else ""
    if d is None and marker is not None and marker.image.startswith(FORK_PREFIX):
        fork_of = marker.image[len(FORK_PREFIX) :]
    spare_of = d.spare_of if d is not None else (marker.pool if marker is not None else "")
    return {
        "fork_of": shown(fork_of, 64),
        "spare_of": shown(spare_of, 64),
        "claims": shown(change.claims or "", 64),
        "claims_pool": shown(d.pool or "", 64) if change.claims and d is not None else "",
        "refill": change.refill,
    }


def _sync(value: object) -> str:
    if value is True:
        return "Synced"
    if value is False:
        return "OutOfSync"
    return "Unknown"


def _condition(value: object, yes: str, no: str) -> str:
    if value is True:
        return yes
    if value is False:
        return no
    return str(value)  # "Unknown", "n/a"


def _why(r: StatusRow, unknown: bool) -> str:
    if unknown:
        reason = (r.observed or {}).get("reason") or "not observed"
        return shown(f"backend {r.backend} not observed ({reason})", 120)
    if r.conditions.get("Synced") is True and r.asleep:
        return "asleep"  # "Synced (asleep)"; the power column says how
    if r.conditions.get("Synced") is True:
        return ""
    action, reasons, drift = r.action, r.reasons, r.drift
    parts = []
    if action and action != "no-op":
        parts.append(str(action))
    if drift:
        parts.append("drift: " + ", ".join(str(d) for d in drift))
    if reasons:
        parts.append(str(reasons[0]))
    return shown("; ".join(parts), 120)


def _epoch(stamp: object) -> float | None:
    """A records timestamp ("2026-01-02T03:04:05Z", UTC) as epoch seconds."""
    try:
        return float(calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def age(created_at: float | None, now: float) -> str:
    """A VM's age in its largest unit: 42s, 5m, 3h, 2d; "-" when not known."""
    if created_at is None:
        return "-"
    seconds = max(0, int(now - created_at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def summary(rows: Iterable[BoardRow]) -> str:
    """The count line under the title: "12 VMs · 10 Synced · 1 OutOfSync · 1 Unknown";
    a pool's spares counted apart from the VMs ("12 VMs · 3 spares · ...")."""
    rows = list(rows)
    counts = {s: sum(1 for r in rows if r.sync == s) for s in ("Synced", "OutOfSync", "Unknown")}
    spares = sum(1 for r in rows if r.spare_of)
    vms = f"{len(rows) - spares} VM{'s' * (len(rows) - spares != 1)}"
    pools = [f"{spares} spare{'s' * (spares != 1)}"] if spares else []
    return " · ".join([vms, *pools, *(f"{n} {s}" for s, n in counts.items() if n)])


# Colour says at a glance what the words say in full (NO_COLOR turns it to grey).
# Parsed once: a style named afresh per cell costs more than the cell (1000 rows).
_GREEN, _YELLOW, _RED = Style(color="green"), Style(color="yellow"), Style(color="red")
_SYNC_STYLE = {"Synced": _GREEN, "OutOfSync": _YELLOW, "Unknown": _RED}
_HEALTH_STYLE = {"Healthy": _GREEN, "Unhealthy": _RED, "Unknown": _RED}
_AGENT_STYLE = {"needs-input": Style(color="yellow", bold=True), "failed": _RED, "working": _GREEN}
_SYNC, _HEALTH, _AGENT = COLUMNS.index("SYNC"), COLUMNS.index("HEALTH"), COLUMNS.index("AGENT")
_VM, _DIM = COLUMNS.index("VM"), Style(dim=True)
_LAST = COLUMNS.index(LAST_COLUMN)

Cell = str | Text


def painted(
    row: BoardRow, now: float, activity: Activity | None = None, last_room: int | None = None
) -> tuple[Cell, ...]:
    """The row's cells as rich Text, SYNC and HEALTH coloured by their word. Never a
    plain string: the table would read one as markup ("[redacted]" would vanish as an
    unknown tag), and parse it each time it measured the row."""
    cells = [Text(c) for c in row.cells(now, activity, last_room)]
    if row.role:  # what it is of, quieter than its name
        cells[_VM] = Text.assemble(row.vm, (f" · {row.role}", _DIM))
    for column, style in (
        (_SYNC, _SYNC_STYLE.get(row.sync)),
        (_HEALTH, _HEALTH_STYLE.get(row.health)),
    ):
        if style is not None:
            cells[column].stylize(style)
    head = row.agents.headline() if row.agents is not None else None
    if head is not None and head.state in _AGENT_STYLE:
        cells[_AGENT].stylize(_AGENT_STYLE[head.state])
    return tuple(cells)
