"""Checkpoints exported to a git ref of another repository hold the host's log to them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sand.audit.check import Export, check_host
from sand.audit.export import default_ref, export_git, exported_claims
from sand.audit.log import LOG_FILE, AuditLog
from sand.audit.seal import Claim
from sand.errors import StateError


@pytest.fixture
def remote(tmp_path: Path) -> str:
    """A repository that, like a protected ref, takes fast-forwards only and no deletion."""
    repo = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(repo)], check=True)
    for key in ("receive.denyNonFastForwards", "receive.denyDeletes"):
        subprocess.run(["git", "-C", str(repo), "config", key, "true"], check=True)
    return str(repo)


def one_record_sealed(home: Path) -> tuple[AuditLog, Claim]:
    log = AuditLog(home)
    log.append("x.y", {"n": 1})
    return log, log.checkpoint()


def test_each_export_is_a_commit_on_the_ref_and_verify_reads_them_back(
    tmp_path: Path, remote: str
) -> None:
    home = tmp_path / "audit"
    log, first = one_record_sealed(home)
    export_git(home, first, remote, default_ref())
    log.append("x.y", {"n": 2})
    second = log.checkpoint()
    export_git(home, second, remote, default_ref())
    claims, first_pub = exported_claims(remote, default_ref())
    assert [c.seq for c in claims] == [second.seq, 1]
    assert first_pub == (home / "signing.pub").read_text().strip()
    assert check_host(home, against=[Export(remote, default_ref())]).ok


def test_a_log_cut_short_with_its_head_is_found_by_the_exported_checkpoint(
    tmp_path: Path, remote: str
) -> None:
    home = tmp_path / "audit"
    log, first = one_record_sealed(home)
    kept = (home / LOG_FILE).read_bytes()
    old_head = (home / "head.json").read_bytes()
    log.append("shell.opened", {"vm": "agent-1"})
    export_git(home, log.checkpoint(), remote, default_ref())
    # the host's user cuts the log back to the first checkpoint, head.json with it
    (home / LOG_FILE).write_bytes(kept)
    (home / "head.json").write_bytes(old_head)
    assert check_host(home).ok  # the host's files alone agree with each other
    report = check_host(home, against=[Export(remote, default_ref())])
    assert report.problem is not None and "truncated" in report.problem.message
    assert report.problem.seq == first.seq + 2  # the first record missing
    with pytest.raises(StateError, match="cut short"):
        export_git(home, first, remote, default_ref())  # and the export refuses to go back


def test_a_replaced_host_key_is_named(tmp_path: Path, remote: str) -> None:
    home = tmp_path / "audit"
    export_git(home, one_record_sealed(home)[1], remote, default_ref())
    for name in ("signing.key", "signing.pub", LOG_FILE, "head.json"):
        (home / name).unlink()  # a fresh log and key, as if history began today
    one_record_sealed(home)
    report = check_host(home, against=[Export(remote, default_ref())])
    assert report.problem is not None and "host key was replaced" in report.problem.message
