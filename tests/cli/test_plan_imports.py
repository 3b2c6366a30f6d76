"""``sand plan`` and ``sand status`` start only what they use: the modules their process
imports (``PYTHONPROFILEIMPORTTIME``, the ``-X importtime`` of the process) hold neither
the engine that carries a plan out (``sand.apply``) nor the terminal UI (Textual, the
board): they read the world through ``sand.survey``."""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand

NOT_FOR_A_PLAN = ("sand.apply", "sand.loops", "textual", "sand.cli.ui")


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


@pytest.mark.parametrize(
    ("command", "code"), [(("plan", "--detailed-exitcode"), 2), (("status",), 0)]
)
def test_a_plan_or_status_process_imports_neither_the_engine_nor_the_ui(
    sand: Sand, command: tuple[str, ...], code: int
) -> None:
    proc = sand.run(*command, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == code, proc.stderr[-2000:]
    modules = imported(proc.stderr)
    assert "sand.survey" in modules  # the list is read right
    found = sorted(
        m for m in modules for bad in NOT_FOR_A_PLAN if m == bad or m.startswith(bad + ".")
    )
    assert found == []
