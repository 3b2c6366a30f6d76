"""The Lima backend object: the Backend protocol over the modules beside it.

Instances live on this machine or on a remote host, driven by ``limactl``. Observing is
one listing per reconcile (``observe.py``); a VM is created from its image
(``create.py``), a VM of a golden image cloned from its golden base (``golden.py``);
changes, deletes and renames are in
``lifecycle.py``; the SSH endpoint in ``guest.py``; crash recovery in ``recover.py``.
Every mutating limactl call is journalled first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from sand.backends.capabilities import Capabilities
from sand.backends.doctor import DoctorReport
from sand.backends.fence import Fence
from sand.backends.lease import LeaseBusy, LeaseGrant, LeaseHolder, LeaseRecord, keep
from sand.backends.lima import claims, golden, guest, lifecycle
from sand.backends.lima import create as create_mod
from sand.backends.lima import egress as egress_mod
from sand.backends.lima import fork as fork_mod
from sand.backends.lima import observe as observe_mod
from sand.backends.lima import recover as recover_mod
from sand.backends.lima import sleep as sleep_mod
from sand.backends.lima.context import Ctx
from sand.backends.lima.doctor import doctor as run_doctor
from sand.backends.lima.lease import LimaLease, read_lease
from sand.backends.lima.limayaml import BundleMount
from sand.backends.lima.preflight import preflight as run_preflight
from sand.backends.lima.runner import FencedRunner, HostRunner, LocalRunner
from sand.backends.protocol import (
    BaseProvisioner,
    PreflightItem,
    PreflightReport,
    RecoveryDecision,
)
from sand.desired import DesiredVM
from sand.desired.spec import DesiredBase
from sand.guest.endpoint import GuestEndpoint, JumpHost
from sand.observed import Observation, ObservedBase, ObservedVM, RecordedVM, SecretsRecord
from sand.state.journal import Journal, PendingEntry

# Instance names are unique on a Lima host (a directory each). Egress is enforced in
# the VM's QEMU on this host (``egress.py``, a field of FIELD_POLICY); on a remote Lima
# host the observation says why not (``egress.REMOTE_GAP``).
CAPABILITIES = Capabilities(
    field_policy=lifecycle.FIELD_POLICY,
    unique_names=True,
    fork=True,
    fork_stops_source=True,
)


class LimaBackend:
    type = "lima"
    capabilities = CAPABILITIES

    def __init__(
        self,
        name: str,
        *,
        project: str,
        runner: HostRunner,
        limactl: str = "limactl",
        clone_parallelism: int = 2,
        jump: JumpHost | None = None,
        key_dir: Path | None = None,
        bundle: BundleMount | None = None,
    ) -> None:
        self.fence = Fence(name)
        self._runner = runner
        self.ctx = Ctx(
            name=name,
            project=project,
            runner=FencedRunner(runner, self.fence),
            limactl=limactl,
            lima_home=runner.lima_home if isinstance(runner, LocalRunner) else None,
            clone_parallelism=clone_parallelism,
            jump=jump,
            key_dir=key_dir,
            bundle=bundle,
        )
        self.name = name
        self.clone_parallelism = clone_parallelism

    def __repr__(self) -> str:
        return f"LimaBackend({self.name!r}, on {self.ctx.runner.where})"

    @property
    def runner(self) -> HostRunner:
        """The host runner (one SSH connection when remote), for another backend to share
        (under that backend's own lease fence)."""
        return self._runner

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        return egress_mod.observe(self.ctx, await observe_mod.observe(self.ctx), desired)

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        return await run_preflight(self.ctx, items)

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        return await lifecycle.rename(self.ctx, current, name, journal)

    async def claim(self, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM:
        return await claims.claim(self.ctx, spare, vm, journal)

    def expect_forks(self, forks: Sequence[DesiredVM]) -> None:
        fork_mod.expect(self.ctx, forks)

    async def create(
        self, vm: DesiredVM, journal: Journal, *, from_base: bool = False, converged: bool = False
    ) -> ObservedVM:
        made = await create_mod.create(self.ctx, vm, journal, from_base=from_base)
        if converged:  # its marker is its own step here: one more write costs little
            await lifecycle.mark_converged(self.ctx, vm, made, None)
        return made

    async def build_base(
        self, base: DesiredBase, provision: BaseProvisioner, journal: Journal
    ) -> ObservedBase:
        return await golden.build(self.ctx, base, provision, journal)

    async def delete_base(self, base: ObservedBase, journal: Journal) -> str:
        return await golden.delete(self.ctx, base, journal)

    async def update(
        self,
        vm: DesiredVM,
        current: ObservedVM,
        fields: Sequence[str],
        journal: Journal,
        *,
        converged: bool = False,
    ) -> ObservedVM:
        made = await lifecycle.update(self.ctx, vm, current, fields, journal)
        if converged:  # its marker is its own step here: one more write costs little
            await lifecycle.mark_converged(self.ctx, vm, made, None)
        return made

    async def sleep(
        self, current: ObservedVM, how: str, journal: Journal, *, by: str = "idle"
    ) -> None:
        await sleep_mod.sleep(self.ctx, current, how, journal, by)

    async def wake(self, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
        await sleep_mod.wake(self.ctx, vm, current, journal)

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        await lifecycle.delete(self.ctx, current, journal)

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        await lifecycle.mark_converged(self.ctx, vm, current, secrets)

    async def open_to_broker(self, vm: DesiredVM, current: ObservedVM) -> None:
        return None  # a restricted guest reaches the broker through its own forward

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        return await guest.endpoint(self.ctx, vm, current, wait=wait)

    async def decide_recovery(self, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
        return await recover_mod.decide(self.ctx, entry, wait=wait)

    async def act_recovery(self, entry: PendingEntry, decision: RecoveryDecision) -> str:
        return await recover_mod.act(self.ctx, entry, decision)

    async def recover(self, entry: PendingEntry) -> str:
        """Decide (waiting for limactl children a killed run left) and act; the caller
        settles the journal entry."""
        return await self.act_recovery(entry, await self.decide_recovery(entry, wait=True))

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        return await recover_mod.vanished(self.ctx, [r.identity for r in recorded])

    def lease(
        self,
        holder: LeaseHolder,
        *,
        ttl: float,
        wait: float = 0.0,
        on_wait: Callable[[LeaseBusy], None] | None = None,
    ) -> AbstractAsyncContextManager[LeaseGrant]:
        return keep(
            LimaLease(self.ctx, holder, ttl),
            project=self.ctx.project,
            backend=self.name,
            ttl=ttl,
            wait=wait,
            on_wait=on_wait,
            fence=self.fence,  # every command on the Lima host passes it
        )

    async def lease_record(self) -> LeaseRecord | None:
        return await read_lease(self.ctx)

    async def doctor(self, desired: Sequence[DesiredVM] = ()) -> DoctorReport:
        return await run_doctor(self.ctx, self._runner)

    async def close(self) -> None:
        await self.ctx.runner.close()


def describe_policy() -> str:
    """The update-vs-replace table, for docs and ``sand explain``."""
    return json.dumps({k: v.value for k, v in lifecycle.FIELD_POLICY.items()}, indent=2)
