"""What a backend can do is declared once, by the abilities it implements: the plan
never promises a sleep or a claim that the engine would refuse (it asserted, or failed
the VM, at apply time when a backend lacked ``Sleeps`` or ``ClaimsSpares``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sand.backends.abilities import ClaimsSpares, Sleeps, capabilities_of
from sand.backends.lima.backend import LimaBackend
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.observed import Observation
from sand.plan import make_plan
from sand.plan.pools import with_pools
from sand.plan.render import plan_to_json
from tests.memory_backend.backend import MemoryBackend
from tests.plan.helpers import POLICIES, converged, desired
from tests.plan.test_cases import CAPABILITIES_BY_TYPE, desired_state, observations, presence_of
from tests.plan.test_pools_declared import POOLED

CASES = Path(__file__).parent / "cases"


@pytest.mark.parametrize("kind", [LimaBackend, ProxmoxBackend, MemoryBackend])
def test_the_capabilities_say_what_the_backend_implements(kind):
    can = capabilities_of(kind)
    assert can.sleeps == issubclass(kind, Sleeps)
    assert can.claims == issubclass(kind, ClaimsSpares)
    assert can.field_policy == kind.capabilities.field_policy


def _idle_plan(sleeps: bool) -> dict[str, object]:
    case = yaml.safe_load((CASES / "idle_sleeps.yaml").read_text())
    state = desired_state(case)
    capabilities = {
        n: replace(CAPABILITIES_BY_TYPE[b.type], sleeps=sleeps)
        for n, b in state.manifest.backends.items()
    }
    inputs = dict(case.get("inputs") or {})
    inputs["presence"] = {vm: presence_of(p) for vm, p in inputs["presence"].items()}
    return plan_to_json(make_plan(state, observations(case, state), capabilities, **inputs))


def test_an_idle_vm_sleeps_only_on_a_backend_that_sleeps():
    slept = [c for c in _idle_plan(sleeps=True)["changes"] if c.get("sleep")]
    assert slept, "the case plans a sleep where the backend sleeps"
    assert [c for c in _idle_plan(sleeps=False)["changes"] if c.get("sleep")] == []


def test_a_pool_vm_claims_a_spare_only_on_a_backend_that_claims():
    state = desired(POOLED)
    obs = converged(state)
    obs["pve"] = Observation("pve", tuple(v for v in obs["pve"].vms if v.name != "agent-4"))
    plan = with_pools(make_plan(state, obs, POLICIES), state, POLICIES)
    assert {c.vm: c for c in plan.changes}["agent-4"].claims == "agents-spare-1"
    cannot = {**POLICIES, "pve": replace(POLICIES["pve"], claims=False)}
    plan = with_pools(make_plan(state, obs, cannot), state, cannot)
    assert not any(c.claims for c in plan.changes)
    agent = {c.vm: c for c in plan.changes}["agent-4"]
    assert agent.action.value == "create"
    assert agent.reasons[-1] == "backend pve claims no spares: made as any VM"
