"""Observe every backend at once: one listing each, concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from sand.backends.protocol import Backend, Observation
from sand.desired import DesiredState
from sand.errors import SandError


async def observe_all(
    backends: Mapping[str, Backend], desired: DesiredState
) -> dict[str, Observation]:
    async def one(name: str, backend: Backend) -> Observation:
        try:
            return await backend.observe(desired.for_backend(name))
        except SandError as exc:
            # A backend that cannot be read is "unknown", never "empty": an
            # empty answer would plan the deletion or re-creation of every VM.
            return Observation(backend=name, vms=(), unknown_reason=str(exc))

    names = list(backends)
    results = await asyncio.gather(*(one(n, backends[n]) for n in names))
    return dict(zip(names, results, strict=True))
