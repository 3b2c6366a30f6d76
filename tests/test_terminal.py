"""sand's one sanitiser (sand.terminal): guest text keeps its words and loses
every way of acting on the terminal it is printed on."""

from __future__ import annotations

import io
import json
import re

from hypothesis import example, given
from hypothesis import strategies as st

from sand.errors import BackendError, GuestCommandError
from sand.terminal import (
    Inert,
    InertBytes,
    continued,
    inert,
    inert_bytes,
    one_line,
    quoted,
)

# What must never survive: ESC and every other C0 control but \n and \t, DEL,
# C1 (U+0080-U+009F), bidi overrides and isolates, lone surrogates.
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
HOSTILE = (
    "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: write the clipboard
    "\x1b]0;owned\x1b\\"  # OSC 0: set the window title, ST-terminated
    "\x1b[2K\x1b[1A"  # CSI: erase the line, cursor up
    "\rApply complete! Resources: 1 added, 0 changed, 0 destroyed.\n"
)

# Pieces that build sequences, so generated text is mostly near-misses and
# nested or unterminated sequences rather than plain letters.
FRAGMENTS = [
    "\x1b", "[", "]", "P", "X", "^", "_", "\\", "(", "#", "7", "c", "52;c;", "0;", "2;",
    "1;31", "m", "?25l", "\x07", "\x18", "\x1a", "\x9b", "\x9d", "\x9c", "\x90", "\x98",
    "\x9e", "\x9f", "\x85", "\r", "\n", "\r\n", "\t", "\x00", "\x7f", "\x08", "\u202e",
    "\u2066", "\u2069", "\udc9b", "\udcff", "Apply complete!", "ok", " ", "é", "…", "字",
]  # fmt: skip
hostile_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=40
).map("".join)
printable_text = st.text(
    alphabet=st.characters(codec="utf-8").filter(lambda c: c.isprintable() or c in "\n\t")
)


@given(hostile_text)
@example(HOSTILE)
@example("\x1b]52;c;unterminated payload\nstill payload")
def test_no_control_survives(text: str) -> None:
    out = inert(text)
    assert not FORBIDDEN.search(out), repr(out)
    assert "\r" not in out and "\x1b" not in out


@given(printable_text)
@example("plain [brackets] ]and; 52;c; ~ \\ é 字 …\n\ttabbed")
def test_printable_text_is_kept_unchanged(text: str) -> None:
    assert inert(text) == text


@given(hostile_text)
def test_idempotent(text: str) -> None:
    once = inert(text)
    assert inert(once) == once


@given(hostile_text, st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_a_stream_in_pieces_comes_out_as_the_whole(text: str, cuts: list[int]) -> None:
    stream = Inert()
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert "".join(stream.feed(p) for p in pieces) == inert(text)


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0, max_value=200), max_size=6))
@example(HOSTILE.encode(), [3, 17])
@example("\u009b31m\u202eX".encode(), [1])
def test_bytes_come_out_as_valid_inert_utf8(data: bytes, cuts: list[int]) -> None:
    out = inert_bytes(data)
    text = out.decode("utf-8")  # strict: never an invalid byte, so never a raw C1 byte
    assert not FORBIDDEN.search(text)
    stream = InertBytes()
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    streamed = b"".join(stream.feed(p) for p in pieces) + stream.feed(b"", final=True)
    assert streamed == out


def test_each_kind_of_sequence_is_removed_and_the_text_kept() -> None:
    cases = {
        "a\x1b]52;c;cHduZWQ=\x07b": "ab",  # OSC 52, BEL-terminated
        "a\x1b]2;title\x1b\\b": "ab",  # OSC 2, ST-terminated
        "a\x9d0;title\x9cb": "ab",  # 8-bit OSC and ST
        "a\x1b[1;31mred\x1b[0mb": "aredb",  # CSI SGR
        "a\x9b2Jb": "ab",  # 8-bit CSI
        "a\x1bP1$r\x1b\\b": "ab",  # DCS
        "a\x1b_apc payload\x1b\\b": "ab",  # APC
        "a\x1b^pm\x07b": "ab",  # PM
        "a\x1bXsos\x1b\\b": "ab",  # SOS
        "a\x1bcb": "ab",  # RIS (full reset), a two-byte sequence
        "a\x1b(Bb": "ab",  # charset designation: ESC, intermediate, final
        "a\x1b7b\x1b8": "ab",  # save/restore cursor
        "a\x85b\x80\x9f": "ab",  # other C1 controls
        "a\x00\x07\x08\x0b\x0c\x7fb": "ab",  # C0 and DEL
        "rm \u202eftx.exe\u202c \u2066x\u2069": "rm ftx.exe x",  # bidi
        "line\r\nnext\rover": "line\nnext\nover",  # CR: a line of its own, never an overwrite
        "bad \udcff byte": "bad \ufffd byte",  # undecodable guest bytes stay visible
        "a\x1b[31": "a",  # a sequence cut off at the end
        "a\x1b]0;never terminated\nmore": "a",  # an open string hides what follows, as on a tty
        "tab\there\n": "tab\there\n",
    }
    for text, want in cases.items():
        assert inert(text) == want, (text, inert(text))


def test_a_fake_success_line_never_starts_a_line_of_sands() -> None:
    err = GuestCommandError("packages", 100, "E: mirror unreachable\n" + HOSTILE)
    text = str(err)
    assert not FORBIDDEN.search(text)
    lines = text.split("\n")
    assert not [ln for ln in lines if ln.startswith("Apply complete!")]
    assert "  | Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in lines
    assert err.output_tail.splitlines()[-1].startswith("Apply complete!")  # kept, inert
    assert "cHduZWQ" not in text and "owned" not in text  # the payloads are gone
    shown = "  vm (laptop) [guest]: " + continued(text)
    assert not [ln for ln in shown.split("\n") if not ln.startswith("  ")]
    assert quoted("a\r\nb\n") == "  | a\n  | b"


def test_every_sand_error_prints_inert() -> None:
    err = BackendError("limactl said: \x1b]52;c;eA==\x07boom\x9b2J", backend="laptop")
    assert str(err) == "backend laptop: limactl said: boom"


def test_one_line_is_built_on_the_same_sanitiser() -> None:
    assert one_line("a\x1bP payload \x1b\\b\r\nc\u200bd") == "ab cd"


def test_log_lines_are_inert(monkeypatch) -> None:
    from sand.logs import configure, get_logger

    for fmt in ("console", "json"):
        out = io.StringIO()
        configure(fmt, "info", stream=out)
        get_logger("test").warning("guest said", output=HOSTILE, nested={"k": ["\x1b[2J"]})
        text = out.getvalue()
        assert "\x1b" not in text and "\r" not in text, (fmt, text)
        if fmt == "json":
            event = json.loads(text)
            assert "\\u001b" not in text and event["output"].startswith("\nApply complete!")
