"""The log as written: chained records, checkpoints signed by a key made once, private files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sand.audit.chain import CHECKPOINT, GENESIS, record_hash
from sand.audit.entries import describe, last_entries
from sand.audit.keys import SIGNING_KEY
from sand.audit.log import CHECKPOINT_EVERY, LOG_FILE, AuditLog
from sand.audit.trail import audit_dir, record, secret_digest
from sand.errors import StateError
from tests.audit.helpers import verify_host


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state" / "audit"


def lines(directory: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (directory / LOG_FILE).read_bytes().splitlines()]


def test_each_record_links_to_the_one_before_and_says_who_when_and_which_sand(state: Path) -> None:
    record("apply.change", vm="agent-1", project="p", change="create")
    record("shell.opened", vm="agent-1", project="p")
    raw = (state / LOG_FILE).read_bytes().splitlines()
    first, second = lines(state)
    assert first["prev"] == GENESIS and first["seq"] == 1
    assert second["prev"] == record_hash(raw[0]) and second["seq"] == 2
    for key in ("ts", "user", "host", "pid", "version"):
        assert first[key]
    assert verify_host(state).ok


def test_a_checkpoint_is_signed_every_so_often_and_kept_beside_the_log(state: Path) -> None:
    log = AuditLog(state)
    log.append_many(("x.y", {"n": i}) for i in range(CHECKPOINT_EVERY + 5))
    kinds = [r["kind"] for r in lines(state)]
    assert kinds.count(CHECKPOINT) == 1
    assert kinds.index(CHECKPOINT) == CHECKPOINT_EVERY  # right after record 1000
    head = json.loads((state / "head.json").read_text())
    assert head["seq"] == CHECKPOINT_EVERY
    report = verify_host(state)
    assert report.ok and report.checkpoints == 1 and report.last_signed == CHECKPOINT_EVERY


def test_the_keys_are_made_once_and_private(state: Path) -> None:
    record("x.y", n=1, digest=secret_digest("canary"))
    AuditLog(state).checkpoint()
    key = (state / SIGNING_KEY).read_bytes()
    AuditLog(state).checkpoint()
    assert (state / SIGNING_KEY).read_bytes() == key
    for name in (SIGNING_KEY, "digest.key", LOG_FILE, "head.json"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert audit_dir() == state


def test_a_record_may_not_pose_as_the_logs_own_fields(state: Path) -> None:
    with pytest.raises(ValueError, match="seq"):
        record("x.y", seq=5)
    with pytest.raises(ValueError, match="kind"):
        record("Not A Kind", n=1)
    assert not (state / LOG_FILE).exists() or not (state / LOG_FILE).read_bytes()


def test_a_checkpoint_by_another_key_is_named(state: Path) -> None:
    record("x.y", n=1)
    AuditLog(state).checkpoint()
    (state / SIGNING_KEY).unlink()
    (state / "signing.pub").unlink()
    AuditLog(state).checkpoint()  # a new key: the old checkpoint no longer checks against it
    report = verify_host(state)
    assert not report.ok and report.problem is not None
    assert report.problem.line == 2 and "another key" in report.problem.message


def test_the_board_reads_a_vms_last_records_from_the_logs_tail_alone(state: Path) -> None:
    log = AuditLog(state)
    log.append_many(("x.y", {"vm": "a", "project": "p", "n": i}) for i in range(300))
    log.append("x.y", {"vm": "a", "project": "other", "n": 300})  # the same name elsewhere
    log.append("shell.opened", {"vm": "a", "mode": "tmux"})  # no project: the VM's
    log.append("x.y", {"vm": "b", "project": "p", "n": 301})
    path = state / LOG_FILE
    got = last_entries(path, "a", count=3, project="p")
    assert [(r["kind"], r.get("n")) for r in got] == [
        ("x.y", 298),
        ("x.y", 299),
        ("shell.opened", None),
    ]
    # a window of the last 2 KiB: only what it holds, its first (cut) line left out
    near = last_entries(path, "a", count=100, project="p", window=2048)
    assert 0 < len(near) < 20 and near[-1]["kind"] == "shell.opened"
    assert last_entries(state / "missing.jsonl", "a") == []
    assert "  a  " in describe(got[-1]) and describe(got[-1]).endswith("mode=tmux")


def test_a_log_moved_aside_while_a_process_holds_it_is_started_anew_at_its_path(
    state: Path,
) -> None:
    record("x.y", n=1)
    (state / LOG_FILE).rename(state / "log.old")  # a person rotating it by hand
    record("x.y", n=2)  # the same process, its log handle still open
    (first,) = lines(state)
    assert (first["seq"], first["n"]) == (1, 2)
    assert [
        r["n"] for r in (json.loads(x) for x in (state / "log.old").read_bytes().splitlines())
    ] == [1]


def test_a_record_that_cannot_be_written_is_an_error_not_a_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "audit").write_text("not a directory")
    with pytest.raises(StateError, match="audit"):
        record("x.y", n=1)
