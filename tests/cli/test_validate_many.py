"""``sand validate`` as a pre-commit hook or CI step uses it: several files (a shell
glob), ``-`` for stdin, ``--json`` for a machine; each file judged on its own, exit 1
when any is invalid, through the real ``python -m sand``."""

from __future__ import annotations

import json

from tests.cli.helpers import Sand

GOOD = (
    "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
    "vms:\n  - name: dev\n    image: debian-12\n"
)
BAD = GOOD.replace("    image: debian-12\n", "    image: debian-12\n    memroy: 4GiB\n")


def test_several_files_each_judged(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(BAD)
    (tmp_path / "c.yaml").write_text(GOOD)
    proc = Sand(tmp_path).run("validate", "a.yaml", "b.yaml", "-f", "c.yaml")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "a.yaml: valid (1 VM on 1 backend)",
        "c.yaml: valid (1 VM on 1 backend)",
    ]
    assert "b.yaml:9:5: " in proc.stderr and "memroy" in proc.stderr
    assert "Error: b.yaml is invalid (1 problem)." in proc.stderr
    assert Sand(tmp_path).run("validate", "a.yaml", "c.yaml").returncode == 0


def test_dash_reads_stdin(tmp_path):
    proc = Sand(tmp_path).run("validate", "-", stdin=GOOD)
    assert (proc.returncode, proc.stdout) == (0, "<stdin>: valid (1 VM on 1 backend)\n")
    proc = Sand(tmp_path).run("validate", "-", stdin=BAD)
    assert proc.returncode == 1 and "<stdin>:9:5: " in proc.stderr


def test_json_lists_each_file_and_its_problems(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(BAD)
    proc = Sand(tmp_path).run("validate", "--json", "a.yaml", "b.yaml", "missing.yaml")
    assert proc.returncode == 1
    a, b, missing = json.loads(proc.stdout)
    assert a == {"file": "a.yaml", "valid": True, "vms": 1, "backends": 1, "problems": []}
    assert b["valid"] is False
    (problem,) = b["problems"]
    assert (problem["file"], problem["line"], problem["column"]) == ("b.yaml", 9, 5)
    assert "memroy" in problem["message"]
    assert missing["valid"] is False and missing["problems"][0]["line"] == 1
    assert "cannot read" in missing["problems"][0]["message"]


# Whether the manifest's models were loaded: the cost a check found valid before saves.
_PROBE = (
    "import sys\n"
    "from sand.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('models loaded' if 'pydantic' in sys.modules else 'models not loaded')\n"
    "raise SystemExit(code)\n"
)


def _validate(tmp_path, *words, env=None, probe=_PROBE):
    """``sand validate WORDS`` in a fresh process, ``probe`` printing after it."""
    import os
    import subprocess
    import sys

    full = {**os.environ, "SAND_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", probe, "validate", *words],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_manifest_found_valid_is_answered_again_without_loading_its_models(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    first = _validate(tmp_path, "a.yaml")
    assert (first.returncode, first.stdout) == (
        0,
        "a.yaml: valid (1 VM on 1 backend)\nmodels loaded\n",
    )
    again = _validate(tmp_path, "a.yaml")
    assert (again.returncode, again.stdout) == (
        0,
        "a.yaml: valid (1 VM on 1 backend)\nmodels not loaded\n",
    )
    as_json = _validate(tmp_path, "--json", "a.yaml")
    assert json.loads(as_json.stdout.rsplit("\n", 2)[0]) == [
        {"file": "a.yaml", "valid": True, "vms": 1, "backends": 1, "problems": []}
    ]
    assert "models not loaded" in as_json.stdout
    # One byte changed: checked again, and found wrong.
    (tmp_path / "a.yaml").write_text(BAD)
    changed = _validate(tmp_path, "a.yaml")
    assert changed.returncode == 1 and "a.yaml:9:5: " in changed.stderr
    assert "models loaded" in changed.stdout
    # An invalid reading is never remembered, nor is stdin.
    assert _validate(tmp_path, "a.yaml").returncode == 1
    assert "models loaded" in _validate(tmp_path, "-").stdout


def test_a_remembered_reading_that_is_not_exactly_this_ones_is_checked_again(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    assert _validate(tmp_path, "a.yaml").returncode == 0
    (kept,) = (tmp_path / "cache" / "validated").iterdir()
    data = json.loads(kept.read_text())
    kept.write_text(json.dumps({**data, "key": "0" * 64}))
    assert "models loaded" in _validate(tmp_path, "a.yaml").stdout
    kept.write_text("{cut sh")
    assert "models loaded" in _validate(tmp_path, "a.yaml").stdout
    # Another path with the same bytes is its own manifest (its relative paths differ).
    (tmp_path / "b.yaml").write_text(GOOD)
    assert "models loaded" in _validate(tmp_path, "b.yaml").stdout


def test_a_zone_gone_from_the_tz_database_is_seen_by_the_next_check(tmp_path):
    """The one part of the machine a check reads: a timezone found valid before is
    checked again once the tz database changed."""
    zones = tmp_path / "zones"
    (zones / "Europe").mkdir(parents=True)
    (zones / "Europe" / "Testland").write_bytes(b"TZif2" + bytes(40))
    env = {"PYTHONTZPATH": str(zones)}
    manifest = GOOD.replace(
        "    image: debian-12\n", "    image: debian-12\n    timezone: Europe/Testland\n"
    )
    (tmp_path / "a.yaml").write_text(manifest)
    assert _validate(tmp_path, "a.yaml", env=env).returncode == 0
    assert "models not loaded" in _validate(tmp_path, "a.yaml", env=env).stdout
    (zones / "Europe" / "Testland").unlink()
    (zones / "Europe").rmdir()
    gone = _validate(tmp_path, "a.yaml", env=env)
    assert gone.returncode == 1 and "Europe/Testland" in gone.stderr, gone.stderr


# Which of the manifest's models had a validator built by a first check (the manifest's
# holds every block's).
_BUILT_PROBE = (
    "import sys\n"
    "from sand.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "from sand.manifest.schema import models\n"
    "print('built:', *sorted(n for n, m in models().items() if m.__pydantic_complete__))\n"
    "raise SystemExit(code)\n"
)


def test_a_first_check_builds_one_validator(tmp_path):
    """GOOD leaves ``defaults:`` out: its default is made without a validator of its own."""
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(BAD)
    good = _validate(tmp_path, "a.yaml", probe=_BUILT_PROBE)
    assert (good.returncode, good.stdout) == (
        0,
        "a.yaml: valid (1 VM on 1 backend)\nbuilt: Manifest\n",
    )
    bad = _validate(tmp_path, "b.yaml", probe=_BUILT_PROBE)
    assert (bad.returncode, bad.stdout) == (1, "built: Manifest\n")
    assert bad.stderr.startswith("b.yaml:9:5: unknown key 'memroy'")
