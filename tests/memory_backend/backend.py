"""A backend kept in memory, behind the same protocol as Lima's and Proxmox's.

Test-only: it drives the engine, ``ApplyRun`` and recovery in their own tests without
a subprocess rig or a real wait, and passes the Backend contract suite
(``tests/contract/``, kind ``memory``). It is put into ``Session.backends`` by the
test; sand's factory and manifest never name it. Every change passes
``World.step``, where a test fails or holds it; every mutation is journalled first
and refuses a VM that is not MANAGED on a fresh look at the world, as the protocol says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence

from sand.backends.capabilities import Capabilities, Mutability
from sand.backends.lease import LeaseBusy, LeaseGrant, LeaseHolder, LeaseRecord, keep
from sand.backends.protocol import (
    BaseProvisioner,
    PreflightItem,
    PreflightReport,
    RecoveryAction,
    RecoveryDecision,
)
from sand.desired import DesiredVM
from sand.desired.spec import DesiredBase
from sand.errors import BackendError, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.observed import (
    Claim,
    Marker,
    Observation,
    ObservedBase,
    ObservedVM,
    Ownership,
    RecordedVM,
    SecretsRecord,
    SleepMark,
    ownership,
)
from sand.state.journal import Journal, PendingEntry
from tests.memory_backend.lease import WorldLease
from tests.memory_backend.recovery import decide
from tests.memory_backend.world import MemVM, World

CAPABILITIES = Capabilities(
    field_policy={
        "image": Mutability.REPLACE,
        "node": Mutability.REPLACE,
        "cpus": Mutability.RESTART,
        "memory": Mutability.RESTART,
        "disk": Mutability.GROW_ONLY,
        "state": Mutability.IN_PLACE,
        "protect": Mutability.IN_PLACE,
        # It enforces egress, as a backend that can does (sand/plan/egress.py): made
        # with the VM, changed in place, listed back. The engine's handling of the
        # policy is tested here; no real backend enforces one yet (docs/egress.md).
        "egress": Mutability.IN_PLACE,
    }
)


class MemoryBackend:
    type = "memory"
    capabilities = CAPABILITIES

    def __init__(self, world: World, *, name: str = "box", project: str = "demo") -> None:
        self.world = world
        self.name = name
        self.project = project
        self._lease_seen: int | None = None  # the lease's gen at the last observe

    @property
    def clone_parallelism(self) -> int:
        return 10

    async def close(self) -> None:
        return None

    # --- what it shows -------------------------------------------------------------------

    def _whose(self, vm: MemVM) -> Ownership:
        m = vm.marker
        claims = [Claim(m.project, m.identity, vm.entry)] if m is not None else []
        return ownership(claims, identity=vm.identity, project=self.project, backend=self.name)

    def _ours_base(self, vm: MemVM) -> bool:
        m = vm.marker
        return (
            bool(vm.base_of)
            and m is not None
            and (m.project, vm.entry)
            == (
                self.project,
                self.name,
            )
        )

    def _observed(self, vm: MemVM) -> ObservedVM:
        s = vm.spec
        return ObservedVM(
            self.name,
            vm.name,
            vm.identity,
            self._whose(vm),
            vm.power,
            cpus=s.get("cpus"),
            memory=s.get("memory"),
            disk=s.get("disk"),
            protect=vm.protect,
            lock=vm.lock,
            node=s.get("node"),
            egress=s.get("egress"),
            marker=vm.marker,
            deep=True,
            details={"uid": vm.uid},
            slept=vm.slept,
        )

    def _base(self, vm: MemVM) -> ObservedBase:
        made = tuple(
            sorted(
                v.name for v in self.world.vms.values() if v.marker and v.marker.base == vm.base_of
            )
        )
        assert vm.marker is not None
        return ObservedBase(self.name, vm.marker.name, vm.identity, vm.base_of, vm.ready, made)

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        await self.world.step("observe", "", self.name)
        if self.world.unreadable:
            return Observation(self.name, (), unknown_reason=self.world.unreadable, requests=1)
        record = self.world.leases.get(self.project)
        self._lease_seen = record.gen if record is not None else 0
        vms = tuple(self._observed(v) for v in self.world.vms.values() if not v.base_of)
        bases = tuple(self._base(v) for v in self.world.vms.values() if self._ours_base(v))
        return Observation(self.name, vms, requests=1, bases=bases)

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        why = "the world has no room for both (as the test asked)"
        cramped = {i.vm.name: why for i in items if i.action == "replace" and self.world.cramped}
        return PreflightReport(destroy_first=cramped, requests=1)

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        return {
            r.identity: "it is still there" if r.identity in self.world.vms else None
            for r in recorded
        }

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        user = vm.user if vm is not None else "sand"
        return GuestEndpoint(f"{current.identity}.memory.invalid", 22, user, "")

    # --- what it does to one VM ------------------------------------------------------------

    def _mine(self, current: ObservedVM, what: str) -> MemVM:
        """The VM as the world holds it now, refused unless it is this entry's own."""
        vm = self.world.vms.get(current.identity)
        whose = self._whose(vm) if vm is not None else "gone"
        if vm is None or whose is not Ownership.MANAGED or vm.base_of:
            raise BackendError(
                f"refusing to {what} {current.name}: it is {whose}", backend=self.name
            )
        return vm

    def _marker(self, vm: DesiredVM, identity: str, uid: str, base: str) -> Marker:
        return Marker(
            self.project,
            vm.name,
            identity,
            "",
            image=vm.image,
            backend=self.name,
            incarnation=uid,
            created_at=int(time.time()),
            base=base,
            pool=vm.spare_of,
        )

    async def create(
        self, vm: DesiredVM, journal: Journal, *, from_base: bool = False, converged: bool = False
    ) -> ObservedVM:
        base = ""
        if from_base:
            assert vm.base is not None
            ready = [v for v in self.world.vms.values() if self._ours_base(v) and v.ready]
            if not any(v.base_of == vm.base.fingerprint for v in ready):
                raise BackendError(f"golden base {vm.base.name} is not ready", backend=self.name)
            base = vm.base.fingerprint
        identity, uid = self.world.new_identity(), uuid.uuid4().hex
        # A failure closes the entry (a half-made VM removed first, a marked one left for
        # the plan to converge, as Lima does); a cancellation (a kill) leaves it open.
        with journal.operation(
            "create", backend=self.name, vm=vm.name, identity=identity, uid=uid
        ) as entry:
            await self.world.step("create", vm.name, self.name)
            made = self.world.add(MemVM(identity, vm.name, dict(vm.infra()), uid=uid))
            journal.step(entry, "created")
            try:
                await self.world.step("make", vm.name, self.name)
            except SandError:
                del self.world.vms[identity]
                raise
            made.marker, made.entry = self._marker(vm, identity, uid, base), self.name
            journal.step(entry, "marked")
            made.protect = vm.protect
            await self.world.step("start", vm.name, self.name)
            made.power = "running"
            if converged:
                made.marker = self._converged(vm, made.marker, None)
        return self._observed(made)

    def _converged(self, vm: DesiredVM, marker: Marker, secrets: SecretsRecord | None) -> Marker:
        kept = (marker.secrets, marker.secrets_at)
        stamp, at = (secrets.stamp, secrets.delivered_at) if secrets is not None else kept
        return dataclasses.replace(
            marker,
            fingerprint=vm.fingerprint,
            guest_fingerprint=vm.guest_fingerprint,
            image=vm.image,
            secrets=stamp,
            secrets_at=at if stamp else 0,
        )

    async def open_to_broker(self, vm: DesiredVM, current: ObservedVM) -> None:
        return None  # no firewall here: nothing stands between a guest and the broker

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        mine = self._mine(current, "mark")
        assert mine.marker is not None
        mine.marker = self._converged(vm, mine.marker, secrets)

    async def update(
        self,
        vm: DesiredVM,
        current: ObservedVM,
        fields: Sequence[str],
        journal: Journal,
        *,
        converged: bool = False,
    ) -> ObservedVM:
        mine = self._mine(current, "update")
        infra = vm.infra()
        with journal.operation("update", backend=self.name, vm=vm.name, identity=mine.identity):
            await self.world.step("update", vm.name, self.name)
            for name in fields:
                if name == "state":
                    mine.power = vm.state
                elif name == "protect":
                    mine.protect = vm.protect
                elif name not in infra:  # a field the manifest dropped (egress): gone
                    mine.spec.pop(name, None)
                else:
                    mine.spec[name] = infra[name]
            if converged:
                assert mine.marker is not None
                mine.marker = self._converged(vm, mine.marker, None)
        return self._observed(mine)

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        if current.identity not in self.world.vms:
            return  # already gone: nothing to do, nothing journalled
        mine = self._mine(current, "delete")
        if mine.protect:
            raise BackendError(f"refusing to delete {current.name}: protected", backend=self.name)
        with journal.operation(
            "delete", backend=self.name, vm=current.name, identity=mine.identity, uid=mine.uid
        ):
            await self.world.step("delete", current.name, self.name)
            del self.world.vms[mine.identity]

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        mine = self._mine(current, "rename")
        with journal.operation("rename", backend=self.name, vm=name, identity=mine.identity):
            await self.world.step("rename", name, self.name)
            mine.name = name
            assert mine.marker is not None
            mine.marker = dataclasses.replace(mine.marker, name=name)
        return self._observed(mine)

    async def sleep(
        self, current: ObservedVM, how: str, journal: Journal, *, by: str = "idle"
    ) -> None:
        mine = self._mine(current, "sleep")
        if mine.power != "running":
            return
        with journal.operation("sleep", backend=self.name, vm=mine.name, identity=mine.identity):
            await self.world.step("update", mine.name, self.name)
            mine.power, mine.slept = "stopped", SleepMark(how, int(time.time()), by)

    async def wake(self, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
        mine = self._mine(current, "wake")
        if mine.power == "running":
            return
        with journal.operation("wake", backend=self.name, vm=mine.name, identity=mine.identity):
            await self.world.step("start", mine.name, self.name)
            mine.power, mine.slept = "running", None

    async def claim(self, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM:
        mine = self._mine(spare, "claim")
        assert mine.marker is not None
        if not vm.pool or mine.marker.pool != vm.pool:
            raise BackendError(f"refusing to claim {spare.name}: no spare of pool {vm.pool}")
        with journal.operation("claim", backend=self.name, vm=vm.name, identity=mine.identity):
            await self.world.step("rename", vm.name, self.name)
            mine.name = vm.name
            mine.marker = dataclasses.replace(mine.marker, name=vm.name, fingerprint="", pool="")
        return self._observed(mine)

    # --- golden bases ------------------------------------------------------------------

    async def build_base(
        self, base: DesiredBase, provision: BaseProvisioner, journal: Journal
    ) -> ObservedBase:
        identity = self.world.new_identity()
        marker = Marker(self.project, base.name, identity, base.fingerprint)
        with journal.operation("build-base", backend=self.name, vm=base.name, identity=identity):
            await self.world.step("build", base.name, self.name)
            made = MemVM(identity, f"sand-base-{base.name}", {}, "running", marker=marker)
            made.entry, made.base_of = self.name, base.fingerprint
            self.world.add(made)
            try:
                await provision(
                    base, GuestEndpoint(f"{identity}.memory.invalid", 22, base.user, "")
                )
            except BaseException:
                del self.world.vms[identity]  # never frozen: nothing is cloned from it
                raise
            made.power, made.ready = "stopped", True
        return self._base(made)

    async def delete_base(self, base: ObservedBase, journal: Journal) -> str:
        vm = self.world.vms.get(base.identity)
        if vm is None:
            return "deleted"
        if not self._ours_base(vm):
            raise BackendError(
                f"refusing to delete {base.identity}: not our base", backend=self.name
            )
        made = self._base(vm).made
        if made:
            return f"kept: {', '.join(made)} made from it"
        with journal.operation(
            "delete-base", backend=self.name, vm=base.name, identity=vm.identity
        ):
            await self.world.step("delete", vm.name, self.name)
            del self.world.vms[vm.identity]
        return "deleted"

    # --- recovery ------------------------------------------------------------------------

    async def decide_recovery(self, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
        # Nothing of a killed run goes on running in the world: there is nothing to wait for.
        return decide(self.world.vms.get(entry.identity), entry, self.name)

    async def act_recovery(self, entry: PendingEntry, decision: RecoveryDecision) -> str:
        if decision.action is not RecoveryAction.DELETE:
            return decision.summary
        again = await self.decide_recovery(entry, wait=True)
        if again.action is RecoveryAction.DELETE:
            await self.world.step("delete", entry.vm, self.name)
            self.world.vms.pop(entry.identity, None)
        return again.summary

    # --- the lease ---------------------------------------------------------------------

    def lease(
        self,
        holder: LeaseHolder,
        *,
        ttl: float,
        wait: float = 0.0,
        on_wait: Callable[[LeaseBusy], None] | None = None,
    ) -> contextlib.AbstractAsyncContextManager[LeaseGrant]:
        keeper = WorldLease(self.world, self.project, self.name, holder, ttl, self._lease_seen)
        return keep(
            keeper,
            project=self.project,
            backend=self.name,
            ttl=ttl,
            wait=wait,
            poll=min(0.1, ttl / 4),
            on_wait=on_wait,
        )

    async def lease_record(self) -> LeaseRecord | None:
        return self.world.leases.get(self.project)
