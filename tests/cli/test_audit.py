"""``sand audit log|verify|checkpoint`` as a person runs them, on a host's real log."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from sand.audit.seal import Claim, signed_by
from sand.audit.trail import record
from tests.audit.helpers import pinned_key
from tests.cli.helpers import Sand
from tests.machine_schemas import validate


@pytest.fixture
def sand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sand:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))  # where record() writes
    return Sand(tmp_path)


def log_file(sand: Sand) -> Path:
    return sand.state_dir / "audit" / "log.jsonl"


def test_log_filters_by_vm_and_time_and_its_json_follows_the_schema(sand: Sand) -> None:
    record("apply.change", vm="a", project="p", change="create", ok=True)
    record("shell.opened", vm="b", mode="tmux")
    record(
        "cp.file",
        vm="a",
        direction="upload",
        host_path="/h/x",
        guest_path="x",
        bytes=1,
        sha256="0" * 64,
    )
    proc = sand.run("audit", "log", "--vm", "a", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate("audit", doc)
    assert [(r["seq"], r["kind"]) for r in doc["records"]] == [(1, "apply.change"), (3, "cp.file")]
    text = sand.run("audit", "log").stdout.splitlines()
    assert len(text) == 3 and "#2  shell.opened  b  " in text[1] and text[1].endswith(" mode=tmux")
    assert sand.run("audit", "log", "--since", "2h").stdout.count("\n") == 3
    assert sand.run("audit", "log", "--since", "2999-01-01").stdout == ""


def test_a_since_that_is_no_time_is_a_usage_error(sand: Sand) -> None:
    proc = sand.run("audit", "log", "--since", "yesterday")
    assert proc.returncode == 1
    assert "--since 'yesterday': give a time" in proc.stderr and "Traceback" not in proc.stderr


def test_an_empty_log_can_be_signed_and_verified(sand: Sand) -> None:
    assert sand.run("audit", "checkpoint").returncode == 0
    proc = sand.run("audit", "verify")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("1 records, 1 checkpoints, signed through record 0: intact\n")


def test_verify_says_intact_then_names_the_edited_record(sand: Sand) -> None:
    for n in range(5):
        record("x.event", vm="a", n=n)
    checkpoint = sand.run("audit", "checkpoint")
    assert checkpoint.returncode == 0 and "checkpoint: record 5 is " in checkpoint.stdout
    proc = sand.run("audit", "verify")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("6 records, 1 checkpoints, signed through record 5: intact\n")
    lines = log_file(sand).read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"n":2', b'"n":7')
    log_file(sand).write_bytes(b"".join(lines))
    proc = sand.run("audit", "verify")
    assert proc.returncode == 1
    assert f"Error: {log_file(sand)}:3 (record 3): the chain breaks here" in proc.stderr


def test_a_torn_last_record_is_reported_and_the_log_still_verifies(sand: Sand) -> None:
    record("x.event", vm="a", n=1)
    with log_file(sand).open("ab") as fh:
        fh.write(b'{"seq":2,"prev":"')  # what a writer killed mid-append leaves
    proc = sand.run("audit", "verify")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"{log_file(sand)}:2: a record torn by a writer killed mid-append (17 bytes" in proc.stdout
    )
    assert "1 records, 0 checkpoints, none signed yet: intact" in proc.stdout


def test_an_exported_checkpoint_finds_the_log_cut_short(sand: Sand, tmp_path: Path) -> None:
    remote = tmp_path / "audit.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    record("x.event", vm="a", n=1)
    kept = log_file(sand).read_bytes()
    record("shell.opened", vm="a", mode="tmux")
    proc = sand.run("audit", "checkpoint", "--export", str(remote), "--ref", "refs/audit/h")
    assert proc.returncode == 0, proc.stderr
    assert f"exported to {remote} refs/audit/h as " in proc.stdout
    log_file(sand).write_bytes(kept)
    (sand.state_dir / "audit" / "head.json").unlink()
    assert sand.run("audit", "verify").returncode == 0  # the host's files alone agree
    proc = sand.run("audit", "verify", "--against", str(remote), "--ref", "refs/audit/h")
    assert proc.returncode == 1
    assert "(record 2): truncated: a checkpoint vouches for record 2" in proc.stderr


def test_a_checkpoint_sent_to_a_syslog_collector_arrives_signed(sand: Sand) -> None:
    collector = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    collector.bind(("127.0.0.1", 0))
    collector.settimeout(30)
    port = collector.getsockname()[1]
    record("x.event", vm="a", n=1)
    with collector:
        proc = sand.run("audit", "checkpoint", "--syslog", f"127.0.0.1:{port}")
        assert proc.returncode == 0, proc.stderr
        datagram = collector.recv(65536).decode()
    assert datagram.startswith("<37>1 ")  # auth.notice, RFC 5424
    header, _, claimed = datagram.partition(" - sand-audit-checkpoint ")
    _pri, _when, _host, app, pid, msgid = header.split()
    assert (app, pid.isdigit(), msgid) == ("sand", True, "audit")
    claim = Claim.from_json(claimed)
    head = Claim.from_json((sand.state_dir / "audit" / "head.json").read_text())
    assert claim == head and claim.seq == 1
    assert signed_by(claim, pinned_key(sand.state_dir / "audit"))
    size = (sand.state_dir / "audit" / "log.jsonl").stat().st_size
    bad = sand.run("audit", "checkpoint", "--syslog", "nowhere")
    assert bad.returncode == 1 and "give HOST:PORT" in bad.stderr
    assert (sand.state_dir / "audit" / "log.jsonl").stat().st_size == size  # nothing signed
