"""Each VM's last provisioning log on the host: replaced per run, 0600, and never a
secret value or a terminal control sequence, whether written by sand or found on disk."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sand.redaction import register_secret
from sand.state.paths import project_dir
from sand.state.provlog import MAX_LINES, load_provision_log, record_provision_log

CANARY = "canary-provlog-7f3e9a"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_the_last_run_replaces_the_log_and_says_how_it_ended() -> None:
    record_provision_log("demo", "a", "provision", True, ["  user: 1 change(s) (0.1s)"])
    record_provision_log("demo", "b", "provision", True, ["b's"])
    record_provision_log("demo", "a", "deliver secrets", False, ["[guest] step secrets failed"])
    lines = load_provision_log("demo", "a")
    assert lines[0].endswith(" deliver secrets: failed")
    assert lines[1:] == ["[guest] step secrets failed"]
    assert load_provision_log("demo", "b")[1:] == ["b's"]
    assert load_provision_log("demo", "nobody") == []
    path = project_dir("demo") / "provision-log.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_no_secret_value_and_no_control_sequence_is_kept_or_shown() -> None:
    register_secret(CANARY)
    record_provision_log("demo", "a", "provision", False, [f"apt said {CANARY}\x1b]0;pwned\x07"])
    path = project_dir("demo") / "provision-log.json"
    assert CANARY not in path.read_text()
    assert "\x1b" not in path.read_text() and "\\u001b" not in path.read_text()
    # A file written by hand (or an older sand) is cleaned again when read.
    data = json.loads(path.read_text())
    data["a"]["lines"] = [f"{CANARY} \x1b[2J"]
    path.write_text(json.dumps(data))
    shown = "\n".join(load_provision_log("demo", "a"))
    assert CANARY not in shown and "\x1b" not in shown and "[redacted]" in shown


def test_only_the_tail_of_a_long_run_is_kept() -> None:
    record_provision_log("demo", "a", "provision", True, [f"line {i}" for i in range(1000)])
    lines = load_provision_log("demo", "a")
    assert len(lines) == MAX_LINES + 1 and lines[-1] == "line 999"
