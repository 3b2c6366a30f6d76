"""The board's rows, as plain data: what ``sand status`` computes, one row per VM, and
what the engine is doing to it while an apply runs. No terminal is needed to build or
test any of it; ``sand.cli.ui.app`` only draws these.

Every string that reaches the screen passes :func:`shown`: made inert (no terminal
control from a guest or a hand-edited state file) and redacted (every secret value
this process resolved), a safety net behind the rule that nothing puts a value there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.style import Style
from rich.text import Text

from sand.apply.events import Phase, StepEvent
from sand.plan.model import Plan, VMChange
from sand.redaction import redact
from sand.terminal import one_line

# What changes while you watch comes first; at 80 columns the backend and the address
# (the longest cell) are a scroll away, and the detail pane names both.
LAST_COLUMN = "LAST APPLY"  # also what an apply under way is doing to the VM
COLUMNS = ("VM", "SYNC", "HEALTH", "PROV", "POWER", "LAST APPLY", "AGE", "BACKEND", "ADDRESS")


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

    def text(self, now: float) -> str:
        """ "creating 3.2s", "waiting for the guest agent 45s / 300s — PVE 503, retry 2/5
        in 1.6s", "✓ done 14.0s": the step with its own clock (against its limit when it
        is a bounded wait); a final one with the time the VM's whole apply took."""
        e = self.event
        if e.phase.final:
            mark = "✓" if e.phase is Phase.DONE else "✗"
            return f"{mark} {shown(e.text, 80)} {e.elapsed:.1f}s"
        took = max(0.0, now - self.began)
        clock = f"{took:.0f}s / {e.limit:.0f}s" if e.limit else f"{took:.1f}s"
        said = f"{shown(e.text, 80)} {clock}"
        r = self.retry.retry if self.retry is not None else None
        if r is not None:
            left = max(0.0, r.delay - (now - self.retry_at))
            of = f"/{r.attempts}" if r.attempts else ""
            said += f" — {shown(r.reason, 60)}, retry {r.attempt}{of} in {left:.1f}s"
        return said


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

    def cells(self, now: float, activity: Activity | None = None) -> tuple[str, ...]:
        """The table's cells; the sync reason and the last result in short (the detail
        pane has them whole)."""
        sync = f"{self.sync} ({self.short_why})" if self.short_why else self.sync
        last = activity.text(time.monotonic()) if activity else self.last_short(now)
        cells = {
            "VM": self.vm,
            "SYNC": sync,
            "HEALTH": self.health,
            "PROV": self.provisioned,
            "POWER": self.power,
            "LAST APPLY": shown(last, 40),
            "AGE": age(self.created_at, now),
            "BACKEND": self.backend,
            "ADDRESS": self.address or "-",
        }
        return tuple(cells[c] for c in COLUMNS)

    @property
    def short_why(self) -> str:
        if self.unobservable:
            return "backend"
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
        hay = " ".join((self.vm, self.backend, self.sync, self.why, self.power)).lower()
        return all(word in hay for word in text.lower().split())


def board_rows(report_rows: Sequence[Mapping[str, Any]], plan: Plan) -> list[BoardRow]:
    """``sand status``'s rows (:func:`sand.apply.status.status_from`) for the board,
    each with what only the plan's observation holds (address, creation time)."""
    changes = {(c.backend, c.vm): c for c in plan.changes}  # one pass: a fleet is big
    return [_board_row(r, changes.get((str(r["backend"]), str(r["vm"])))) for r in report_rows]


def _board_row(r: Mapping[str, Any], change: VMChange | None) -> BoardRow:
    conditions = r.get("conditions") or {}
    observed = r.get("observed")
    unknown = isinstance(observed, dict) and observed.get("power") == "unknown"
    o = change.observed if change is not None else None
    return BoardRow(
        vm=shown(r["vm"], 64),
        backend=shown(r["backend"], 32),
        sync=_sync(conditions.get("Synced")),
        why=_why(r, unknown),
        health=_condition(conditions.get("Healthy"), "Healthy", "Unhealthy"),
        provisioned=_condition(conditions.get("Provisioned"), "yes", "no"),
        power="absent" if observed is None else shown(observed.get("power", "?"), 16),
        address=shown(o.address, 48) if o is not None and o.address else "",
        created_at=float(o.marker.created_at) if o and o.marker and o.marker.created_at else None,
        last_error=shown(r.get("last_error") or "", 300),
        last_ok=None if not r.get("last_reconcile") else not r.get("last_error"),
        last_at=_epoch(r.get("last_reconcile")),
        unobservable=unknown,
    )


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


def _why(r: Mapping[str, Any], unknown: bool) -> str:
    if unknown:
        reason = (r.get("observed") or {}).get("reason") or "not observed"
        return shown(f"backend {r['backend']} not observed ({reason})", 120)
    conditions = r.get("conditions") or {}
    if conditions.get("Synced") is True:
        return ""
    action, reasons, drift = r.get("action"), r.get("reasons") or [], r.get("drift") or []
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
    import calendar

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
    """The count line under the title: "12 VMs · 10 Synced · 1 OutOfSync · 1 Unknown"."""
    rows = list(rows)
    counts = {s: sum(1 for r in rows if r.sync == s) for s in ("Synced", "OutOfSync", "Unknown")}
    vms = f"{len(rows)} VM{'s' * (len(rows) != 1)}"
    return " · ".join([vms, *(f"{n} {s}" for s, n in counts.items() if n)])


# Colour says at a glance what the words say in full (NO_COLOR turns it to grey).
# Parsed once: a style named afresh per cell costs more than the cell (1000 rows).
_GREEN, _YELLOW, _RED = Style(color="green"), Style(color="yellow"), Style(color="red")
_SYNC_STYLE = {"Synced": _GREEN, "OutOfSync": _YELLOW, "Unknown": _RED}
_HEALTH_STYLE = {"Healthy": _GREEN, "Unhealthy": _RED, "Unknown": _RED}
_SYNC, _HEALTH = COLUMNS.index("SYNC"), COLUMNS.index("HEALTH")

Cell = str | Text


def painted(row: BoardRow, now: float, activity: Activity | None = None) -> tuple[Cell, ...]:
    """The row's cells as rich Text, SYNC and HEALTH coloured by their word. Never a
    plain string: the table would read one as markup ("[redacted]" would vanish as an
    unknown tag), and parse it each time it measured the row."""
    cells = [Text(c) for c in row.cells(now, activity)]
    for column, style in (
        (_SYNC, _SYNC_STYLE.get(row.sync)),
        (_HEALTH, _HEALTH_STYLE.get(row.health)),
    ):
        if style is not None:
            cells[column].stylize(style)
    return tuple(cells)
