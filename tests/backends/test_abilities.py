"""Abilities a backend may have besides the protocol are asked with ``isinstance`` of a
runtime-checkable protocol (``sand.backends.protocol``), never found with ``getattr``."""

from __future__ import annotations

import asyncio

from sand.backends.abilities import Diagnoses, Warns
from sand.backends.protocol import Backend
from tests.fakepve_rig.rig import FakePveRig


def test_proxmox_is_a_backend_that_diagnoses_and_warns(fakepve_server: FakePveRig) -> None:
    backend = fakepve_server.make_backend()
    try:
        assert isinstance(backend, Backend)
        assert isinstance(backend, Diagnoses) and isinstance(backend, Warns)
        assert backend.warnings == []  # nothing applied yet
    finally:
        asyncio.run(backend.close())


def test_an_object_without_the_ability_has_not_got_it() -> None:
    class Plain:
        name = "plain"

    assert not isinstance(Plain(), Diagnoses)
    assert not isinstance(Plain(), Warns)
