"""docs/systemd/sand-sync.service as systemd itself reads it: ``systemd-analyze verify``
finds nothing to say, and ``systemd-analyze security`` scores its confinement 3 or
better (it was 7.9, EXPOSED)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "docs" / "systemd" / "sand-sync.service"


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (the systemd package)")
    # verify checks that ExecStart's program exists: the one the docs install, faked.
    sand = tmp_path / "sand"
    sand.write_text("#!/bin/sh\n")
    sand.chmod(0o755)
    path = tmp_path / "sand-sync.service"
    path.write_text(UNIT.read_text().replace("/opt/sand/bin/sand", str(sand)))
    return path


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_unit_verifies_without_a_word(unit):
    proc = analyze("verify", "--man=no", str(unit))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_the_unit_is_confined(unit):
    proc = analyze("security", "--offline=true", str(unit))
    found = re.search(r"Overall exposure level for sand-sync\.service: (\d+\.\d)", proc.stdout)
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) <= 3.0, proc.stdout
