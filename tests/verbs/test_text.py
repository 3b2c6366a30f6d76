"""Guest text on the host's terminal: no escapes, no forged lines."""

from __future__ import annotations

from sand.terminal import decode, one_line, visible


def test_one_line_drops_escapes_controls_and_line_breaks() -> None:
    hostile = "\x1b[2J\x1b]0;pwned\x07ok\nrow2\rx\u202eyz\x00\x7f\x9b"
    out = one_line(hostile)
    assert out == "ok row2 xyz"
    assert all(ch.isprintable() for ch in out)


def test_one_line_truncates() -> None:
    assert one_line("x" * 300, 10) == "x" * 9 + "…"


def test_visible_keeps_lines_and_shows_other_controls() -> None:
    assert visible("a\n\tb\x1b[31m\u202e") == "a\n\tb\\x1b[31m\\u202e"


def test_invalid_utf8_never_prints_raw() -> None:
    text = decode(b"ok\xff")
    assert one_line(text) == "ok"
    assert visible(text) == "ok\\udcff"
