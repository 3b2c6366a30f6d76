"""The Proxmox VE backend object: the Backend protocol over the modules beside it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from sand.backends.capabilities import Capabilities
from sand.backends.proxmox import claims, firewall, firewall_drift, lifecycle
from sand.backends.proxmox import observe as observe_mod
from sand.backends.proxmox import update as update_mod
from sand.backends.proxmox.context import Ctx, clones_at_once
from sand.backends.proxmox.lifecycle import FIELD_POLICY
from sand.egress.registry import proxied

if TYPE_CHECKING:
    from sand.backends.doctor import DoctorReport
    from sand.backends.lease import LeaseBusy, LeaseGrant, LeaseHolder, LeaseRecord
    from sand.backends.protocol import (
        BaseProvisioner,
        PreflightItem,
        PreflightReport,
        RecoveryDecision,
    )
    from sand.backends.proxmox.template import TemplateResult
    from sand.desired import DesiredVM
    from sand.desired.spec import DesiredBase
    from sand.guest.endpoint import GuestEndpoint
    from sand.observed import Observation, ObservedBase, ObservedVM, RecordedVM, SecretsRecord
    from sand.state.journal import Journal, PendingEntry

# What creates, changes, deletes, recovers, sleeps, leases, checks or builds is imported
# by the method that does it: a plan (observe alone) starts without those modules.

# PVE names need not be unique: vmids are, so sand's VM stands beside a namesake.
# A VM's egress is enforced by the PVE firewall (sand.backends.proxmox.firewall), which
# matches addresses, never names: a deny policy with domains needs sand's egress proxy
# on this host, where the backend's owner declares it (``egress_proxy``); refused
# without one (docs/egress.md).
EGRESS_NAMES_GAP = (
    "the PVE firewall matches addresses, not names, and no egress proxy is declared for "
    "this backend's guests: set egress_proxy (this host's address:port on the guests' "
    "route) on the backend, or list cidrs only; docs/egress.md#proxmox"
)
CAPABILITIES = Capabilities(
    field_policy=FIELD_POLICY, suspends=True, fork=True, egress_names_gap=EGRESS_NAMES_GAP
)


class ProxmoxBackend:
    type = "proxmox"
    capabilities = CAPABILITIES

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.name = ctx.name
        if ctx.config.egress_proxy is not None:
            # The declared proxy serves the names the firewall cannot match.
            self.capabilities = dataclasses.replace(CAPABILITIES, egress_names_gap="")

    @property
    def clone_parallelism(self) -> int:
        """Clones at once: the manifest's, the one chosen for the storage at the first
        clone, or (before it) the default for local storage."""
        return self.ctx.clones_chosen or clones_at_once(self.ctx.config.clone_parallelism, None)

    def __repr__(self) -> str:
        c = self.ctx.config
        return f"ProxmoxBackend({self.name!r}, https://{c.host}:{c.port}, pool={c.pool!r})"

    @property
    def requests(self) -> int:
        """API requests sent so far (retries included)."""
        return self.ctx.client.requests

    @property
    def warnings(self) -> list[str]:
        """Warnings of tasks that ended ``WARNINGS: n`` (they succeeded), oldest first."""
        return self.ctx.client.warnings

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        seen = await observe_mod.observe(self.ctx, desired)
        if seen.unknown_reason or not any(firewall.denies(vm.egress) for vm in desired):
            return seen
        # Once per plan, and only where a VM asks for a deny policy: is it applied at all?
        start = self.ctx.client.requests
        gap = await firewall.datacenter_gap(self.ctx)
        spent = seen.requests + self.ctx.client.requests - start
        seen = dataclasses.replace(seen, egress_gap=gap, requests=spent)
        if gap or not self.ctx.config.egress_drift:
            # A gap: every deny policy is refused, nothing to compare it with. No drift
            # read: the owner chose a plan of constant cost over seeing hands' changes.
            return seen
        # A policy the marker vouches for is read back: a hand may have opened it since.
        return await firewall_drift.read_drift(self.ctx, seen, desired)

    def send_listing(self) -> None:
        observe_mod.send_listing(self.ctx)

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        from sand.backends.proxmox import preflight

        return await preflight.preflight(self.ctx, items)

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        return await lifecycle.rename(self.ctx, current, name, journal)

    async def claim(self, spare: ObservedVM, vm: DesiredVM, journal: Journal) -> ObservedVM:
        return await claims.claim(self.ctx, spare, vm, journal)

    async def create(
        self, vm: DesiredVM, journal: Journal, *, from_base: bool = False, converged: bool = False
    ) -> ObservedVM:
        from sand.backends.proxmox import create as create_mod

        return await create_mod.create(
            self.ctx, vm, journal, from_base=from_base, converged=converged
        )

    async def build_base(
        self, base: DesiredBase, provision: BaseProvisioner, journal: Journal
    ) -> ObservedBase:
        from sand.backends.proxmox import bases

        return await bases.build(self.ctx, base, provision, journal)

    async def delete_base(self, base: ObservedBase, journal: Journal) -> str:
        from sand.backends.proxmox import bases

        return await bases.delete(self.ctx, base, journal)

    async def update(
        self,
        vm: DesiredVM,
        current: ObservedVM,
        fields: Sequence[str],
        journal: Journal,
        *,
        converged: bool = False,
    ) -> ObservedVM:
        return await update_mod.update(self.ctx, vm, current, fields, journal, converged=converged)

    async def sleep(
        self, current: ObservedVM, how: str, journal: Journal, *, by: str = "idle"
    ) -> None:
        from sand.backends.proxmox import sleep as sleep_mod

        await sleep_mod.sleep(self.ctx, current, how, journal, by)

    async def wake(self, vm: DesiredVM | None, current: ObservedVM, journal: Journal) -> None:
        from sand.backends.proxmox import sleep as sleep_mod

        await sleep_mod.wake(self.ctx, vm, current, journal)

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        await lifecycle.delete(self.ctx, current, journal)

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        await lifecycle.mark_converged(self.ctx, vm, current, secrets)

    async def open_to_broker(self, vm: DesiredVM, current: ObservedVM) -> None:
        # Not journalled: a write cut short leaves a rule the next plan's drift read
        # shows and its apply puts right; there is nothing half made to undo.
        await firewall.open_to_broker(self.ctx, current.node or "", current.identity, vm)

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        from sand.backends.proxmox import guest

        return await guest.endpoint(self.ctx, vm, current, wait=wait)

    async def decide_recovery(self, entry: PendingEntry, *, wait: bool) -> RecoveryDecision:
        from sand.backends.proxmox import fork as fork_mod
        from sand.backends.proxmox import recover as recover_mod

        if entry.op == fork_mod.OP:  # the snapshot a fork left on its source
            return await fork_mod.decide_fork(self.ctx, entry, wait=wait)
        return await recover_mod.decide(self.ctx, entry, wait=wait)

    async def act_recovery(self, entry: PendingEntry, decision: RecoveryDecision) -> str:
        from sand.backends.proxmox import fork as fork_mod
        from sand.backends.proxmox import recover as recover_mod

        if entry.op == fork_mod.OP:
            return await fork_mod.act_fork(self.ctx, entry, decision)
        return await recover_mod.act(self.ctx, entry, decision)

    async def recover(self, entry: PendingEntry) -> str:
        """Decide (waiting for what the killed run left running) and act; the caller
        settles the journal entry."""
        return await self.act_recovery(entry, await self.decide_recovery(entry, wait=True))

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        from sand.backends.proxmox import recover as recover_mod

        return await recover_mod.vanished(self.ctx, recorded)

    def lease(
        self,
        holder: LeaseHolder,
        *,
        ttl: float,
        wait: float = 0.0,
        on_wait: Callable[[LeaseBusy], None] | None = None,
    ) -> AbstractAsyncContextManager[LeaseGrant]:
        from sand.backends.lease import keep  # here: a plan takes no lease
        from sand.backends.proxmox.lease import ProxmoxLease

        return self._holding(
            keep(
                ProxmoxLease(self.ctx, holder, ttl),
                project=self.ctx.project,
                backend=self.name,
                ttl=ttl,
                wait=wait,
                on_wait=on_wait,
                fence=self.ctx.client.fence,  # every API request passes it
            )
        )

    @asynccontextmanager
    async def _holding(
        self, lease: AbstractAsyncContextManager[LeaseGrant]
    ) -> AsyncIterator[LeaseGrant]:
        """The lease, counted on the context while it is held (a create then needs no
        check for another run's duplicate: no other run writes). Losing it cancels the
        holder, which leaves this body too."""
        async with lease as grant:
            self.ctx.leases_held += 1
            try:
                yield grant
            finally:
                self.ctx.leases_held -= 1

    async def lease_record(self) -> LeaseRecord | None:
        from sand.backends.proxmox.lease import read_lease

        return await read_lease(self.ctx)

    async def doctor(self, desired: Sequence[DesiredVM] = ()) -> DoctorReport:
        from sand.backends.proxmox.doctor import doctor as run_doctor

        return await run_doctor(
            self.ctx,
            forks=any(vm.fork is not None for vm in desired),
            egress=any(firewall.denies(vm.egress) for vm in desired),
            proxied=any(proxied(vm) for vm in desired),
        )

    async def build_template(
        self,
        *,
        name: str | None = None,
        url: str | None = None,
        checksum: str | None = None,
        image_storage: str | None = None,
        node: str | None = None,
    ) -> TemplateResult:
        """Make (once) the template this backend clones from, from a cloud image."""
        from sand.backends.proxmox.template import build
        from sand.backends.proxmox.template_request import make_request

        request = make_request(
            self.ctx, name=name, url=url, checksum=checksum, image_storage=image_storage, node=node
        )
        return await build(self.ctx, request)

    async def close(self) -> None:
        await self.ctx.client.close()
