"""Startup stays light: validate and --version never import the heavy clients."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "proxmoxer",
    "asyncssh",
    "requests",
    "aiohttp",
    "watchfiles",
    "rich",
    "tenacity",
    "textual",
    "prometheus_client",
)

PROBE = """
import sys
from sand.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print("HEAVY=" + ",".join(heavy))
"""


def loaded_by(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("HEAVY=")]
    assert line, proc.stderr
    return line[0].removeprefix("HEAVY=")


def test_version_imports_no_backend_client():
    assert loaded_by("--version") == ""


def test_validate_imports_no_backend_client():
    assert loaded_by("validate", "manifests/example.yaml") == ""
