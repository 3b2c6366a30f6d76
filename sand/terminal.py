"""Text from a guest, made inert before the host's terminal or disk sees it.

A guest -- or anything that repeats what a guest said: a step's output, a
Proxmox task log, limactl's stderr, a forge's answer -- controls bytes that
sand prints and stores. Control sequences in them act on the *host's*
terminal: OSC 52 writes the clipboard, OSC 0/2 set the window title, CSI
moves the cursor and erases, a lone carriage return lets a line overwrite the
one before it (a fake "Apply complete!"), a bidi override makes ``rm`` read
as ``mr``. This module is the one place that removes them:

* :func:`inert` keeps the text and its lines and tabs, and removes every
  escape sequence (CSI, OSC, DCS/SOS/PM/APC strings, two-byte ESC
  sequences, in 7- and 8-bit form), every other C0 and C1 control, DEL and
  the bidi overrides and isolates; ``\\r\\n`` and a lone ``\\r`` become
  ``\\n``, and a lone surrogate (undecodable guest bytes) becomes U+FFFD.
  :class:`Inert` does the same incrementally, for streamed output.
* :func:`one_line` is for a table cell or a name inside a message: inert,
  on one line, without any invisible character, bounded.
* :func:`quoted` and :func:`continued` put guest lines inside sand's own
  messages so that none of them starts a line the way sand's output does.
* :func:`visible` shows every control as an escape instead of dropping it,
  for text a person reviews before acting on it (a commit to publish).

Sequences are recognised the way a VT/xterm parser does (an unterminated
string swallows what follows, as it would on the terminal), so what is left
is exactly the text the guest made visible, minus its effects. Stdlib only:
the logging and error paths import this.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import MutableMapping
from typing import Any

# Everything that starts a sequence or is removed, outside a sequence. \t and
# \n are the only controls that survive; \r is turned into \n.
_SPECIAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CSI_BODY = re.compile("[ -?]*")  # parameter and intermediate bytes, in any order
# OSC/DCS/SOS/PM/APC payloads end at BEL or ST (ESC \ or 8-bit ST); CAN and SUB
# abort them; any other ESC starts a new sequence (and ends the string).
_STRING_END = re.compile("[\x07\x18\x1a\x1b\x9c]")
_STRING_STARTS = "]PX^_"  # after ESC: OSC, DCS, SOS, PM, APC
_C1_STRING_STARTS = "\x90\x98\x9d\x9e\x9f"
_SURROGATES = re.compile("[\ud800-\udfff]")
_LINE_BREAKS = re.compile(r"[\t\n\r]+")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

_GROUND, _ESC, _ESC_INTERMEDIATE, _CSI, _STRING = range(5)


class Inert:
    """An incremental :func:`inert`: feed text in pieces, get what is safe to
    show so far; a sequence split across pieces is still removed whole."""

    def __init__(self) -> None:
        self._state = _GROUND
        self._after_cr = False  # the last thing shown was a \r turned into \n

    def feed(self, text: str) -> str:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            state = self._state
            if state == _GROUND:
                m = _SPECIAL.search(text, i)
                end = m.start() if m else n
                if end > i:
                    start = i + 1 if self._after_cr and text[i] == "\n" else i  # \r\n → \n
                    out.append(text[start:end])
                    self._after_cr = False
                if m is None:
                    break
                i = end + 1
                ch = text[end]
                self._after_cr = ch == "\r"
                if ch == "\r":
                    out.append("\n")
                elif ch == "\x1b":
                    self._state = _ESC
                elif ch == "\x9b":
                    self._state = _CSI
                elif ch in _C1_STRING_STARTS:
                    self._state = _STRING
                elif "\ud800" <= ch <= "\udfff":
                    out.append("\ufffd")
                # any other control, DEL, C1 or bidi character: dropped
            elif state == _STRING:
                m = _STRING_END.search(text, i)
                if m is None:
                    break  # still inside the string: all of it is payload
                i = m.end()
                self._state = _ESC if m.group() == "\x1b" else _GROUND
            elif state == _CSI:
                body = _CSI_BODY.match(text, i)
                i = body.end() if body else i
                if i == n:
                    break
                if "@" <= text[i] <= "~":
                    i += 1  # the final byte
                self._state = _GROUND  # anything else aborts; it is read as text again
            else:  # after ESC, or ESC and intermediates
                ch = text[i]
                if state == _ESC and ch == "[":
                    self._state, i = _CSI, i + 1
                elif state == _ESC and ch in _STRING_STARTS:
                    self._state, i = _STRING, i + 1
                elif state == _ESC and ch == "\x1b":
                    i += 1  # a new ESC restarts the sequence
                elif " " <= ch <= "/":
                    self._state, i = _ESC_INTERMEDIATE, i + 1
                elif "0" <= ch <= "~":
                    self._state, i = _GROUND, i + 1  # the final byte
                else:
                    self._state = _GROUND  # aborted: read it as text again
        return "".join(out)


class InertBytes:
    """:class:`Inert` over a byte stream (UTF-8; invalid bytes show as U+FFFD)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._inert = Inert()

    def feed(self, data: bytes, final: bool = False) -> bytes:
        return self._inert.feed(self._decoder.decode(data, final)).encode("utf-8")


def inert(text: str) -> str:
    """``text`` with every terminal control removed, its lines and tabs kept."""
    if not _SPECIAL.search(text):
        return text
    return Inert().feed(text)


def inert_bytes(data: bytes) -> bytes:
    """Guest bytes made inert (UTF-8 out; invalid input bytes become U+FFFD)."""
    return InertBytes().feed(data, final=True)


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def one_line(text: str, limit: int = 200) -> str:
    """``text`` as one printable line: inert, line breaks as spaces, no invisible
    characters, at most ``limit`` characters."""
    text = _LINE_BREAKS.sub(" ", inert(_SURROGATES.sub("", text)))
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
    validator here accepts and every printer here escapes or replaces."""
    return raw.decode("utf-8", errors="surrogateescape")


def quoted(text: str, prefix: str = "  | ") -> str:
    """Guest lines inside a message of sand's: inert, each behind ``prefix``, so
    none can pass for a line of sand's own (a forged "Apply complete!")."""
    return "\n".join(prefix + line for line in inert(text).rstrip("\n").split("\n"))


def continued(text: str, indent: str = "    ") -> str:
    """A multi-line message printed after a label of sand's: inert, and every
    line after the first indented, so no line of it starts where sand's do."""
    return inert(text).rstrip("\n").replace("\n", "\n" + indent)


def inert_value(value: Any) -> Any:
    """``value`` with every string in it inert (dicts, lists and tuples walked;
    an exception becomes its inert text)."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {k: inert_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(inert_value(v) for v in value)
    if isinstance(value, BaseException):
        return inert(f"{type(value).__name__}: {value}")
    return value


def inert_processor(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog: no log line carries a control sequence, whoever put it in an event."""
    return {key: inert_value(value) for key, value in event.items()}
