"""The redaction processor: a registered secret never reaches rendered output."""

from __future__ import annotations

import io
import json

from sand.logs import configure, get_logger, redact, register_secret

CANARY = "canary-7f3a9c1e-do-not-leak"


def test_secret_is_redacted_from_messages_fields_and_exceptions():
    register_secret(CANARY)
    for fmt in ("console", "json"):
        out = io.StringIO()
        configure(fmt, "debug", stream=out)
        log = get_logger()
        log.info(f"token is {CANARY}", token=CANARY, nested={"k": [CANARY]})
        try:
            raise RuntimeError(f"failed with {CANARY}")
        except RuntimeError:
            log.exception("boom")
        text = out.getvalue()
        assert CANARY not in text
        assert "[redacted]" in text
        if fmt == "json":
            assert all(json.loads(line) for line in text.splitlines())


def test_multiline_secret_lines_are_each_redacted():
    key = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQC\n-----END KEY-----"
    register_secret(key)
    assert "AAAAB3NzaC1yc2EAAAADAQABAAABAQC" not in redact("line: AAAAB3NzaC1yc2EAAAADAQABAAABAQC")


def test_short_values_are_not_registered_to_avoid_redacting_words():
    register_secret("ab")
    assert redact("ab abc") == "ab abc"


def test_logs_go_to_the_stderr_of_the_moment_the_first_logger_is_asked_for(monkeypatch):
    # configure() runs at start-up; a stderr replaced (and the old one closed) before
    # anything logs must not take the first log line down with it.
    old = io.StringIO()
    monkeypatch.setattr("sys.stderr", old)
    configure("json", "info")
    old.close()
    new = io.StringIO()
    monkeypatch.setattr("sys.stderr", new)
    get_logger().info("hello")
    assert json.loads(new.getvalue())["event"] == "hello"
