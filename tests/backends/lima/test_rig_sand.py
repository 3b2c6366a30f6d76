"""The README's way to drive sand against the real Lima by hand drives sand: the rig's
Lima user finds a working ``sand`` on its PATH (``python3 -m tests.rig.lima run -- sand
...``), this checkout's code with its dependencies, not ``command not found`` nor a
``ModuleNotFoundError`` past ``--version``. No VM boots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sand import __version__
from tests.required import missing
from tests.rig import lima as lima_rig
from tests.rig._util import RigError

ROOT = Path(__file__).resolve().parents[3]


def by_hand(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.rig.lima", "run", "--", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )


def test_the_lima_user_runs_sand_by_its_name(tmp_path):
    try:
        lima = lima_rig.rig()
    except RigError as exc:
        missing(f"the real Lima rig: {exc}")
    version = by_hand("sand", "--version")
    assert version.returncode == 0, version.stdout + version.stderr
    assert version.stdout.strip() == f"sand {__version__}"
    # validate loads pydantic and yaml: the dependencies are there, not only the code.
    manifest = lima.home / "by-hand.yaml"
    manifest.write_text(
        "apiVersion: sand/v1\nproject: by-hand\nbackends:\n  laptop: {type: lima}\n"
        "vms:\n  - {name: dev, backend: laptop, image: debian-12}\n"
    )
    try:
        checked = by_hand("sand", "validate", str(manifest))
    finally:
        manifest.unlink()
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == f"{manifest}: valid (1 VM on 1 backend)"
