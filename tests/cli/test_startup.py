"""Startup stays light: validate and --version never import the heavy clients."""

from __future__ import annotations

import os
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


GC_PROBE = """
import gc
from sand.cli.main import main
main(["validate", "manifests/example.yaml"])
print("GC=%d" % gc.get_threshold()[0])
"""


def test_the_collector_runs_rarely_in_a_sand_process():
    # A plan allocates millions of objects that live to its end: the default first
    # generation (700 allocations) re-scanned them, 12% of a 5,000-VM plan's CPU.
    proc = subprocess.run(
        [sys.executable, "-c", GC_PROBE], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert "GC=100000" in proc.stdout, proc.stderr


COLLECTOR_PROBE = """
import gc, sys
from sand.cli.main import main
before = gc.get_stats()[0]["collections"]
main(["validate", sys.argv[1]])
print("COLLECTED=%d ON=%s" % (gc.get_stats()[0]["collections"] - before, gc.isenabled()))
"""


def test_the_collector_does_not_run_while_a_fleet_is_validated(tmp_path):
    # Millions of allocations, all living to the end: a plan or validate of a large
    # fleet scanned them for cycles for nothing. Back on for whoever called main().
    manifest = tmp_path / "fleet.yaml"
    vms = "".join(f"  - name: vm-{i:05d}\n" for i in range(20000))
    manifest.write_text(
        "apiVersion: sand/v1\nproject: big\nbackends:\n  local: {type: lima}\nvms:\n" + vms
    )
    proc = subprocess.run(
        [sys.executable, "-c", COLLECTOR_PROBE, str(manifest)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "COLLECTED=0 ON=True" in proc.stdout, proc.stdout + proc.stderr


FREEZE_PROBE = """
import gc, sys
from sand.cli.main import main
sys.argv = ["sand", *sys.argv[1:]]
main()  # as the program: its own argv
program = gc.get_freeze_count()
gc.unfreeze()
main(sys.argv[1:])  # as a caller in the process (the tests)
print("FROZEN=%s CALLER=%s" % (program > 0, gc.get_freeze_count() > 0))
"""


def test_what_validate_built_is_left_out_of_the_collection_at_exit():
    # Python collects once more at shutdown, collector on or off: a pass over
    # everything a one-shot command built, freed with the process anyway (~20 ms of
    # a validate). A caller in the same process keeps its objects collectable.
    proc = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE, "validate", "manifests/example.yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "FROZEN=True CALLER=False" in proc.stdout, proc.stdout + proc.stderr


PLUGIN_PROBE = """
import sys
from sand.cli.main import main
main(["validate", "manifests/example.yaml"])
from pydantic.plugin import _loader
print("SCANNED=%s" % (_loader._plugins is not None))
"""


def test_no_pydantic_plugin_is_looked_for(tmp_path):
    # A cache of its own: the manifest is read and its models built, not answered from
    # a check before (then no model is built, and the test could not fail).
    env = {**os.environ, "SAND_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", PLUGIN_PROBE],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert "SCANNED=False" in proc.stdout, proc.stderr


def test_a_run_builds_the_parser_of_its_own_command_only():
    # The ~40 other subcommands' parsers cost every run ~4 ms to build for nothing.
    from sand.cli.main import _parser_for
    from sand.cli.parser import subcommands as _subcommands

    assert _subcommands(_parser_for(["--log-level", "debug", "plan", "--json"])) == {"plan"}
    assert _subcommands(_parser_for(["--log-format=json", "status"])) == {"status"}
    everything = _subcommands(_parser_for(["--help"]))
    assert {"plan", "apply", "validate", "completion"} <= everything
    # No command, or a word that is none: the whole parser (its error lists them all).
    assert _subcommands(_parser_for([])) == everything
    assert _subcommands(_parser_for(["plna"])) == everything
