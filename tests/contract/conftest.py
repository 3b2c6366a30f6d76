"""One fixture, ``far``: each contract test runs once per backend kind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sand.backends.protocol import Backend
from sand.state.journal import Journal
from tests.backends.lima.sshd_rig import sshd  # noqa: F401  (fixture)
from tests.contract.memory_rig import MemoryRig
from tests.contract.rigs import ContractRig, FakePve, LimaStandIn, RemoteLima
from tests.limactl_standin import StandIn

KINDS = ("fakepve", "lima", "lima-remote", "memory")
# The far sides with processes of their own: a lease held by another process (killed,
# or on another host) is theirs to test; the memory world lives in this process only.
PROCESS_KINDS = tuple(k for k in KINDS if k != "memory")


@pytest.fixture(params=KINDS)
def far(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ContractRig:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    kind = request.param
    if kind == "fakepve":
        return FakePve(tmp_path, request.getfixturevalue("fakepve_server"))
    if kind == "memory":
        return MemoryRig(tmp_path)
    if kind == "lima":
        standin = StandIn.create(tmp_path / "standin")
        standin.configure(require_tty_false=True, host_user="claude")
        return LimaStandIn(tmp_path, standin)
    return RemoteLima(tmp_path, request.getfixturevalue("sshd"))


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.jsonl")


MakeBackend = Callable[..., Backend]


@pytest.fixture
async def backend_of(far: ContractRig) -> AsyncIterator[MakeBackend]:
    """``backend_of(project="demo")``: a backend on the rig, as a fresh run builds it;
    every one made is closed at the end."""
    made: list[Backend] = []

    def make(project: str = "demo") -> Backend:
        backend = far.backend(project=project)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()
