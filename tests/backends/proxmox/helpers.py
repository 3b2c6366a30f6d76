"""Test helpers: run sand's own planner and engine against one Proxmox backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sand.apply.engine import ApplyResult, execute
from sand.apply.recovery import replay_journal
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.desired import DesiredState, DesiredVM, build_desired
from sand.manifest.models import Manifest
from sand.observed import ObservedVM, Ownership
from sand.plan import Plan, make_plan
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


async def _no_provisioning(*_args: Any) -> None:
    raise AssertionError("these tests run with provision: false")


def state_of(rig: FakePveRig, vms: Sequence[dict[str, Any]], **kwargs: Any) -> DesiredState:
    """The desired state of a manifest with these VM entries on the rig's backend."""
    return build_desired(Manifest.model_validate(rig.manifest(vms, **kwargs)))


async def plan(backend: ProxmoxBackend, state: DesiredState) -> Plan:
    observation = await backend.observe(state.for_backend(backend.name))
    return make_plan(state, {backend.name: observation}, {backend.name: backend.capabilities})


async def apply(
    backend: ProxmoxBackend, state: DesiredState, journal: Journal
) -> tuple[Plan, ApplyResult]:
    """What ``sand apply --auto-approve`` does: recover, observe, plan, execute."""
    await replay_journal(journal, {backend.name: backend})
    the_plan = await plan(backend, state)
    result = await execute(the_plan, {backend.name: backend}, journal, _no_provisioning)
    return the_plan, result


def managed(observed: Sequence[ObservedVM]) -> dict[str, ObservedVM]:
    return {vm.name: vm for vm in observed if vm.ownership is Ownership.MANAGED}


def by_name(desired: Sequence[DesiredVM]) -> dict[str, DesiredVM]:
    return {vm.name: vm for vm in desired}
