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
