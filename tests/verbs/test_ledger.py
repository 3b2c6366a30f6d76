"""The landing ledger: private, append-only JSON lines of metadata."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sand.errors import StateError
from sand.verbs import ledger


def test_records_are_appended_as_json_lines_at_0600(tmp_path: Path) -> None:
    path = tmp_path / "p" / "landing.jsonl"
    ledger.append(path, [{"action": "sweep", "branch": "a"}])
    ledger.append(path, [{"action": "web", "branch": "b"}])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert [json.loads(line)["branch"] for line in lines] == ["a", "b"]
    recs = ledger.read(path)
    assert [r["action"] for r in recs] == ["sweep", "web"]
    assert all(r["v"] == 1 and r["ts"].endswith("Z") for r in recs)


def test_a_loose_mode_is_tightened_and_torn_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "landing.jsonl"
    path.write_text('{"v": 1, "action": "old"}\n{"torn": \n')
    path.chmod(0o644)
    ledger.append(path, [{"action": "new"}])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [r["action"] for r in ledger.read(path)] == ["old", "new"]


def test_a_symlinked_ledger_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    path = tmp_path / "landing.jsonl"
    os.symlink(target, path)
    with pytest.raises(OSError):
        ledger.append(path, [{"action": "x"}])
    assert target.read_text() == ""


def test_a_non_regular_ledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "landing.jsonl"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so opening for write won't block
    try:
        with pytest.raises(StateError):
            ledger.append(path, [{"action": "x"}])
    finally:
        os.close(fd)


def test_ledger_path_is_under_the_project_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path))
    assert ledger.ledger_path("demo") == tmp_path / "projects" / "demo" / "landing.jsonl"
