"""What a provisioning run's output may show: its tail, cut to the last lines and with
every secret value of the VM scrubbed out (``[redacted]``), and the lines the guest's
steps mark as changes."""

from __future__ import annotations

from collections.abc import Mapping

from sand.redaction import redact
from sand.terminal import inert

CHANGED = "sand:changed "  # a step's line naming what it changed (never a value)
TAIL_LINES = 20


def tail_of(output: bytes, values: Mapping[str, str]) -> str:
    """The last lines of a step's output for an error message: inert, scrubbed of the
    VM's ``values`` and of every registered secret, the change lines left out."""
    text = output.decode(errors="replace")
    # Inert before the tail is cut (a lone \r is a line of its own) and before
    # redaction: a value split by escape sequences is whole again only then.
    text = inert(scrub(text, values))
    lines = [ln for ln in text.splitlines() if not ln.startswith(CHANGED)]
    return redact(scrub("\n".join(lines[-TAIL_LINES:]), values))


def scrub(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each of ``values`` replaced by ``[redacted]``, the longest first."""
    # sand.logs.redact knows every registered value; these are this VM's own,
    # including ones a caller passed as plain strings.
    for value in sorted(values.values(), key=len, reverse=True):
        if value:
            text = text.replace(value, "[redacted]")
    return text
