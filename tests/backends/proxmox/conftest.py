"""Fixtures for the Proxmox backend tests: a seeded fakepve, sand's backend on it, a journal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

PROJECT = "demo"


@pytest.fixture
def rig(fakepve_server: FakePveRig) -> FakePveRig:
    return fakepve_server


@pytest.fixture
async def backend(rig: FakePveRig) -> AsyncIterator[ProxmoxBackend]:
    b = rig.make_backend(PROJECT)
    yield b
    await b.close()


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.jsonl")
