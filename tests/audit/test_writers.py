"""Several sand processes appending at once: one chain, no record lost or interleaved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sand.audit.chain import CHECKPOINT
from sand.audit.log import LOG_FILE
from tests.audit.helpers import verify_host

ROOT = Path(__file__).resolve().parents[2]


def writer_env(state: Path) -> dict[str, str]:
    return {**os.environ, "SAND_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}


def test_four_processes_appending_at_once_make_one_chain(tmp_path: Path) -> None:
    env = writer_env(tmp_path / "state")
    per_writer = 400
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.audit.writer", str(per_writer), "10", f"w{i}"],
            env=env,
            cwd=ROOT,
        )
        for i in range(4)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    home = tmp_path / "state" / "audit"
    records = [json.loads(x) for x in (home / LOG_FILE).read_bytes().splitlines()]
    mine = [r for r in records if r["kind"] != CHECKPOINT]
    assert len(mine) == 4 * per_writer
    for i in range(4):  # each writer's records all there, in the order it wrote them
        assert [r["n"] for r in mine if r["tag"] == f"w{i}"] == list(range(1, per_writer + 1))
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    report = verify_host(home)
    assert report.ok, report.problem
    assert report.checkpoints == 1  # the 1,000th record was sealed, whoever wrote it
