"""``sand plan`` starts only what it uses: the modules a plan process imports
(``PYTHONPROFILEIMPORTTIME``, the ``-X importtime`` of the process) hold neither the
execution engine nor the terminal UI (Textual, the board)."""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand

# What a fresh interpreter imports is the subject: only a process of its own shows it.
pytestmark = pytest.mark.sand_process

NOT_FOR_A_PLAN = ("sand.apply.engine", "sand.apply.replace", "textual", "sand.cli.ui")


def imported(stderr: str) -> set[str]:
    # "import time: <self us> | <cumulative us> | <indented module name>"
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "p-1"}]))
    return s


def test_a_plan_process_imports_neither_the_engine_nor_the_ui(sand: Sand) -> None:
    proc = sand.run("plan", "--detailed-exitcode", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    modules = imported(proc.stderr)
    assert "sand.plan" in modules  # the list is read right
    found = sorted(
        m for m in modules for bad in NOT_FOR_A_PLAN if m == bad or m.startswith(bad + ".")
    )
    assert found == []
