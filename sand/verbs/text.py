"""Making guest-supplied text safe to print on the host's terminal.

A guest controls branch names, paths, commit messages and file contents. Any
of them can carry terminal escapes (rewrite the screen, set the window title,
hide a line), bidi overrides (make ``rm`` read as ``mr``) or newlines (forge a
second table row). :func:`one_line` removes all of that for cells and
messages; :func:`visible` keeps the line structure of a block of text but
shows every other control character as an escape, so a reviewer *sees* that
something was there instead of having it silently dropped.
"""

from __future__ import annotations

import re
import unicodedata

# ESC [ ... final byte, ESC ] ... BEL/ST, and lone ESC + one byte.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)", re.S)
_LINE_BREAKS = re.compile(r"[\t\n\r]+")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def one_line(text: str, limit: int = 200) -> str:
    """``text`` as one printable line: escapes dropped, other controls removed."""
    text = _LINE_BREAKS.sub(" ", _ANSI.sub("", text))
    out = "".join(ch for ch in text if not _unsafe(ch))
    return out if len(out) <= limit else out[: limit - 1] + "…"


def visible(text: str) -> str:
    """``text`` with its lines and tabs kept and every other control shown as ``\\xNN``."""
    out: list[str] = []
    for ch in text:
        if ch in "\n\t" or not _unsafe(ch):
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def decode(raw: bytes) -> str:
    """Guest bytes as text; invalid UTF-8 survives as lone surrogates, which no
    validator here accepts and every printer here escapes."""
    return raw.decode("utf-8", errors="surrogateescape")
