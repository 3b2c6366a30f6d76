"""A session of sand's own on memory backends: the manifest is a real file, loaded and
built into the desired state as ``open_session`` does; only the backends are the
test's, put into ``Session.backends`` (sand's factory never builds a memory one).

Every entry is declared ``type: lima`` so the manifest validates; the VMs are made
with ``provision: false`` unless a test says otherwise, so no guest is reached."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sand.apply.run import ApplyRun, Approver, AutoApprove, QuietView, RunEnd, RunView, Steering
from sand.manifest import load_manifest
from sand.plan.model import Plan
from sand.project import Session, desired_from
from sand.survey.plan import compute_plan
from tests.memory_backend.backend import MemoryBackend
from tests.memory_backend.world import World

# What every replacement test wants out of the way: the unpushed-work guard needs a
# guest to sweep, and the memory backend has none (the guard has tests of its own).
NO_GUARD = Steering(allow_data_loss=True)


class Fleet:
    """One project's manifest on memory backends, one world per backend entry."""

    def __init__(self, workdir: Path, worlds: Mapping[str, World], project: str = "demo") -> None:
        self.workdir, self.worlds, self.project = workdir, dict(worlds), project
        self.manifest = workdir / "sand.yaml"

    def write(
        self, vms: Sequence[Mapping[str, Any]], images: Mapping[str, Any] | None = None
    ) -> Path:
        """The manifest: ``vms`` (each on the first backend unless it names one), and the
        golden ``images`` they may name."""
        first = next(iter(self.worlds))
        data = {
            "apiVersion": "sand/v1",
            "project": self.project,
            "backends": {
                name: {"type": "lima", "lima_home": str(self.workdir / f"{name}-unused")}
                for name in self.worlds
            },
            "defaults": {"provision": False, "image": "debian-12", "memory": "2GiB"},
            **({"images": dict(images)} if images else {}),
            "vms": [{"backend": first, **vm} for vm in vms],
        }
        self.manifest.write_text(yaml.safe_dump(data, sort_keys=False))
        return self.manifest

    def session(self) -> Session:
        """A fresh session on the manifest as written now, with backends of its own on
        the shared worlds (another run, another process)."""
        loaded = load_manifest(self.manifest)
        session = Session(loaded, desired_from(loaded))
        session.backends = {
            name: MemoryBackend(world, name=name, project=self.project)
            for name, world in self.worlds.items()
        }
        return session

    async def apply_async(
        self,
        approver: Approver | None = None,
        view: RunView | None = None,
        steering: Steering = NO_GUARD,
        **run: Any,
    ) -> RunEnd:
        """One ``ApplyRun`` on a fresh session, as ``sand apply --auto-approve`` by default."""
        session = self.session()
        try:
            return await ApplyRun(
                session, approver or AutoApprove(), view or QuietView(), steering, **run
            ).run()
        finally:
            await session.close()

    def apply(self, **run: Any) -> RunEnd:
        return asyncio.run(self.apply_async(**run))

    def cut_at(self, step: str, vm: str, world: str = "", **run: Any) -> None:
        """An apply cancelled where VM ``vm`` reaches ``step`` (what kill -9 leaves: its
        journal entries open); the hold is gone afterwards."""
        where = self.worlds[world or next(iter(self.worlds))]
        gate = where.hold(step, vm=vm)

        async def cut() -> None:
            task = asyncio.ensure_future(self.apply_async(**run))
            await asyncio.wait_for(gate.reached.wait(), 30)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return
            raise AssertionError(f"the run ended before {vm} reached {step}")

        asyncio.run(cut())
        where.clear_faults()

    def plan(self, **options: Any) -> Plan:
        """What ``sand plan`` plans now (it replays nothing: it shows what apply will)."""

        async def plan() -> Plan:
            session = self.session()
            try:
                return await compute_plan(session, **options)
            finally:
                await session.close()

        return asyncio.run(plan())
