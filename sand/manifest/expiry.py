"""``expires:``: when a disposable VM is due to go, as people write it.

Two forms, each checked at validate time:

- an absolute time, ISO 8601: a date (``2026-12-01``, its midnight) or a date and
  time (``2026-12-01T18:00``, ``2026-12-01T18:00:00+02:00``); UTC when no zone is
  written. YAML reads an unquoted date as a timestamp: both are accepted.
- a duration counted from the VM's creation: a whole number and a unit, ``90m``,
  ``8h``, ``3d``;
- ``never``, for a VM that does not take the expiry its defaults give.

Every accepted value is kept in one canonical spelling (``2026-12-01T00:00:00Z``,
``8h``), so a quoted and an unquoted date are the same expiry. Only the standard
library is imported: ``sand validate`` stays fast.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

UNITS = {"m": 60, "h": 3600, "d": 86400}
MAX_SECONDS = 3650 * 86400  # ten years: anything longer is a typo, not a lease
_DURATION = re.compile(r"^([0-9]{1,9})([mhd])$")
NEVER = "never"  # a VM's own "no expiry", over one its defaults give
DURATION_PATTERN = r"^[0-9]+[mhd]$"
_ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}")
DESCRIPTION = (
    "When this VM is deleted: an ISO 8601 date or date-time (UTC unless a zone is "
    "written; a date is its midnight), or a duration from the VM's creation ('90m', "
    "'8h', '3d'); 'never' overrides one the defaults give. An expired VM is planned for "
    "deletion, behind the unpushed-work and mass-delete guards, and not created again "
    "while its expires: says it has passed."
)
_HINT = (
    "write an ISO 8601 date or date-time ('2026-12-01', '2026-12-01T18:00Z') or a "
    "duration ('90m', '8h', '3d')"
)


@dataclass(frozen=True)
class Expiry:
    """A parsed ``expires:``: ``at`` (epoch seconds) or ``after`` (seconds from creation)."""

    text: str  # the canonical spelling
    at: float | None = None
    after: int | None = None

    def deadline(self, created_at: int) -> float | None:
        """When a VM made at ``created_at`` (0: unknown) expires; None when unknowable."""
        if self.at is not None:
            return self.at
        if not created_at or self.after is None:
            return None
        return float(created_at + self.after)


def canonical(value: object) -> str:
    """The canonical spelling of an ``expires:`` value; ``ValueError`` says what is wrong."""
    if isinstance(value, (bool, int, float)):
        raise ValueError(f"{value!r} has no unit: {_HINT}")
    if isinstance(value, dt.datetime):
        return _instant(value)
    if isinstance(value, dt.date):
        return _instant(dt.datetime(value.year, value.month, value.day))
    if not isinstance(value, str):
        raise ValueError(_HINT)
    text = value.strip()
    if text == NEVER:
        return NEVER
    found = _DURATION.match(text)
    if found:
        seconds = int(found[1]) * UNITS[found[2]]
        if seconds <= 0:
            raise ValueError(f"{text!r} is no time at all: a duration is at least 1m")
        if seconds > MAX_SECONDS:
            raise ValueError(f"{text!r} is longer than ten years")
        return f"{int(found[1])}{found[2]}"
    if not _ISO_DATE.match(text):
        raise ValueError(f"{text!r} is not a time: {_HINT}")
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid ISO 8601 date or date-time") from None
    return _instant(parsed)


def _instant(when: dt.datetime) -> str:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    when = when.astimezone(dt.UTC)
    if when.year < 1970:
        raise ValueError(f"{when.date().isoformat()} is before 1970: not a time sand can mean")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expiry(text: str) -> Expiry | None:
    """The :class:`Expiry` of a canonical spelling (what :func:`canonical` returned);
    None for ``never``."""
    if text == NEVER:
        return None
    found = _DURATION.match(text)
    if found:
        return Expiry(text, after=int(found[1]) * UNITS[found[2]])
    when = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return Expiry(text, at=when.timestamp())


def format_instant(epoch: float) -> str:
    """Epoch seconds as the plan writes a time: ``2026-12-01T18:00:00Z``."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
