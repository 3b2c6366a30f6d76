"""The in-memory backend as a contract rig (kind ``memory``): the world object is its
far side. Its manifest names a Lima entry only so the manifest validates; the factory
never builds it: ``backend`` hands out a MemoryBackend on the rig's one world."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sand.backends.protocol import Backend
from sand.observed import Marker
from tests.contract.rigs import BOX, ContractRig, Outage
from tests.memory_backend.backend import MemoryBackend
from tests.memory_backend.world import MemVM, World


class MemoryRig(ContractRig):
    kind = "memory"
    defaults: ClassVar[Mapping[str, Any]] = {"image": "debian-12", "memory": "2GiB"}

    def __init__(self, workdir: Path, world: World | None = None) -> None:
        super().__init__(workdir)
        self.world = world or World()

    def backend_fields(self) -> dict[str, Any]:
        return {"type": "lima", "lima_home": str(self.workdir / "never-used")}

    def backend(self, *, project: str = "demo") -> Backend:
        return MemoryBackend(self.world, name=BOX, project=project)

    def names(self) -> list[str]:
        return sorted(vm.name for vm in self.world.vms.values() if not vm.base_of)

    def snapshot(self) -> dict[str, Any]:
        return self.world.snapshot()

    def remove_by_hand(self, identity: str) -> None:
        del self.world.vms[identity]

    def plant_unmanaged(self, name: str) -> None:
        self.world.add(MemVM(self.world.new_identity(), name, {"cpus": 1}, "running"))

    def copy_by_hand(self, identity: str, name: str) -> None:
        original = self.world.vms[identity]
        marker: Marker | None = original.marker  # it names the original's identity
        copy = MemVM(self.world.new_identity(), name, dict(original.spec), marker=marker)
        copy.entry = original.entry
        self.world.add(copy)

    def outages(self) -> list[Outage]:
        world = self.world

        def unreadable() -> None:
            world.unreadable = "the world cannot be read (as the test asked)"

        def readable() -> None:
            world.unreadable = ""

        return [
            Outage("the listing reads as untrusted", unreadable, readable),
            Outage(
                "the listing fails",
                lambda: world.fail("observe", "the listing failed", times=100),
                world.clear_faults,
            ),
        ]

    def slow_down_the_make(self) -> None:
        self.world.hold("make")  # the VM exists, no marker yet

    def slow_down_the_start(self) -> None:
        self.world.hold("start")  # marked, not started

    def half_made(self, name: str) -> bool:
        return any(vm.marker is None for vm in self.world.named(name))

    def marked(self, name: str) -> bool:
        return any(vm.marker is not None for vm in self.world.named(name))

    def bases(self) -> dict[str, bool]:
        return {vm.identity: vm.ready for vm in self.world.vms.values() if vm.base_of}
