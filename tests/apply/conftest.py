"""The in-memory fleet the apply run's own tests drive (``tests/memory_backend``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """One project on one memory backend, ``box``; this host's state under tmp_path."""
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return Fleet(tmp_path, {"box": World()})


@pytest.fixture
def world(fleet: Fleet) -> World:
    return fleet.worlds["box"]
