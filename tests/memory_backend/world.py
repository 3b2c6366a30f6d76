"""The far side of the in-memory backend: one world of VMs, golden bases and leases.

Several :class:`~tests.memory_backend.backend.MemoryBackend` objects (two sessions, two
appliers, a killed run and the next one) see one world, as two processes see one PVE
cluster. What a test asserts about the world it reads here: the VMs with their
markers, power and lock, the bases, the leases, and ``log``, the order the backends
changed things in.

Faults are injected by the test, never by time: ``fail`` makes the next calls of a
step raise, ``hold`` stops a step until the test releases it (or cancels the run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sand.backends.lease import LeaseRecord
from sand.errors import BackendError
from sand.observed import Marker, SleepMark

# Where a test can fail or hold a backend's work: the steps each operation goes through.
STEPS = ("observe", "create", "make", "start", "update", "delete", "rename", "build", "lease")


@dataclass
class MemVM:
    """One VM (or golden base) as the world holds it."""

    identity: str
    name: str
    spec: dict[str, Any]  # DesiredVM.infra(): image, cpus, memory, disk, node, ports
    power: str = "stopped"
    protect: bool = False
    lock: str | None = None
    marker: Marker | None = None
    entry: str = ""  # the backend entry its marker names ("": none)
    uid: str = ""  # the incarnation, as the create journalled it
    slept: SleepMark | None = None
    # Golden bases: the fingerprint built, and whether it is frozen (ready to clone).
    base_of: str = ""
    ready: bool = False


class Gate:
    """A held step: ``reached`` once a call arrives, and the call waits until ``open``."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    def open(self) -> None:
        self.opened.set()

    async def pass_through(self) -> None:
        self.reached.set()
        await self.opened.wait()


@dataclass
class World:
    vms: dict[str, MemVM] = field(default_factory=dict)  # by identity
    leases: dict[str, LeaseRecord] = field(default_factory=dict)  # by project
    log: list[tuple[str, str]] = field(default_factory=list)  # (step, VM name)
    unreadable: str = ""  # why a listing cannot be read now ("": it can)
    cramped: bool = False  # no room for a VM and its replacement: destroy-before-create
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    _fails: dict[str, list[tuple[Callable[[str], bool], str]]] = field(default_factory=dict)
    _holds: dict[str, list[tuple[Callable[[str], bool], Gate]]] = field(default_factory=dict)

    def new_identity(self) -> str:
        return f"m{next(self._ids)}"

    def named(self, name: str) -> list[MemVM]:
        return [vm for vm in self.vms.values() if vm.name == name]

    def add(self, vm: MemVM) -> MemVM:
        self.vms[vm.identity] = vm
        return vm

    # --- fault injection, driven by the test --------------------------------------------

    def fail(
        self,
        step: str,
        message: str = "failed (as the test asked)",
        *,
        vm: str = "",
        times: int = 1,
    ) -> None:
        """The next ``times`` calls of ``step`` (for VM ``vm``: name or prefix; "": any)
        raise a BackendError saying ``message``."""
        assert step in STEPS, step
        self._fails.setdefault(step, []).extend([(_matcher(vm), message)] * times)

    def hold(self, step: str, *, vm: str = "") -> Gate:
        """Every call of ``step`` (for VM ``vm``) waits at the gate until it is opened."""
        assert step in STEPS, step
        gate = Gate()
        self._holds.setdefault(step, []).append((_matcher(vm), gate))
        return gate

    def clear_faults(self) -> None:
        self._fails.clear()
        for holds in self._holds.values():
            for _, gate in holds:
                gate.open()
        self._holds.clear()

    async def step(self, step: str, name: str, backend: str) -> None:
        """Where each backend call passes: logged, failed or held as the test said."""
        fails = self._fails.get(step, [])
        for i, (matches, message) in enumerate(fails):
            if matches(name):
                del fails[i]
                raise BackendError(f"{step} of {name}: {message}", backend=backend)
        for matches, gate in self._holds.get(step, []):
            if matches(name):
                await gate.pass_through()
        if step != "observe":
            self.log.append((step, name))

    def snapshot(self) -> dict[str, Any]:
        return {i: dataclasses.astuple(vm) for i, vm in sorted(self.vms.items())}


def _matcher(vm: str) -> Callable[[str], bool]:
    return lambda name: not vm or name == vm or name.startswith(vm + "-")
