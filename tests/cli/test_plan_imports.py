"""Each command starts only what it uses, read off the modules its process imports
(``PYTHONPROFILEIMPORTTIME``, the ``-X importtime`` of the process): ``sand plan`` and
``sand status`` read the world through ``sand.survey`` and hold neither the engine that
carries a plan out (``sand.apply``), the loops, the terminal UI (Textual, the board) nor
rich (structlog would import its traceback and pretty-printer), nor structlog itself
while nothing is logged, nor tenacity while no request is retried; ``sand --version``
and ``sand validate`` hold no backend, HTTP client or logging; the Proxmox backend
imports requests and proxmoxer only when it writes (reads, a plan's and a status's
all, go over the standard library's HTTP client)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.helpers import Sand

# What a fresh interpreter imports is the subject: only a process of its own shows it.
pytestmark = pytest.mark.sand_process

# rich itself is looked for (and refused) while structlog loads: its parts must not load.
RICH = ("rich.console", "rich.traceback", "rich.pretty")
NOT_FOR_A_PLAN = ("sand.apply", "sand.loops", "textual", "sand.cli.ui", *RICH)
CLIENTS = ("requests", "proxmoxer", "urllib3", "asyncssh")
# What the Proxmox backend changes the world with: a plan or status only observes.
PROXMOX_WRITERS = tuple(
    f"sand.backends.proxmox.{m}" for m in ("create", "clone", "template", "recover", "fork")
)
# What a no-op plan of VMs with no idle policy never reaches: the guests' deep check
# (and the agents' state it parses), the one-writer lease, the bundle's tar writer.
NOT_FOR_A_NOOP_PLAN = ("sand.survey.health", "sand.agentstate", "sand.backends.lease", "tarfile")
NOT_TO_VALIDATE = (*CLIENTS, *NOT_FOR_A_PLAN, "sand.backends", "sand.apply", "structlog")
# --version needs no manifest either: no pydantic models are built, no YAML is read;
# nor sand's errors (with them dataclasses and inspect: ~7 ms of its ~50).
NOT_FOR_THE_VERSION = (*NOT_TO_VALIDATE, "pydantic", "yaml", "sand.manifest", "sand.errors")


def among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for p in packages if m == p or m.startswith(p + "."))


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
    assert among(modules, NOT_FOR_A_PLAN) == []
    assert "structlog" not in modules  # configured, but nothing was logged
    assert "tenacity" not in modules  # its one listing needed no retry
    # Reads go over the standard library's HTTP client (plainget.py): requests,
    # urllib3 and proxmoxer load with the first write, and a plan writes nothing.
    assert among(modules, CLIENTS) == []
    assert among(modules, PROXMOX_WRITERS) == []
    if command[0] == "plan":
        assert among(modules, NOT_FOR_A_NOOP_PLAN) == []


def test_version_and_validate_import_no_backend_client_nor_logging(sand: Sand) -> None:
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    version = sand.run("--version", env=env)
    assert version.returncode == 0, version.stderr[-2000:]
    assert "sand.cli.main" in imported(version.stderr)
    assert among(imported(version.stderr), NOT_FOR_THE_VERSION) == []
    validate = sand.run("validate", env=env)
    assert validate.returncode == 0, validate.stderr[-2000:]
    assert "sand.manifest.models" in imported(validate.stderr)
    assert among(imported(validate.stderr), NOT_TO_VALIDATE) == []


def test_the_proxmox_backend_imports_its_http_client_with_its_first_request() -> None:
    code = (
        "import sys\n"
        "from sand.backends.proxmox.backend import ProxmoxBackend\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {clients!r}))"
    ).format(clients=set(CLIENTS) - {"asyncssh"})
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert proc.stdout.strip() == "[]", proc.stdout
