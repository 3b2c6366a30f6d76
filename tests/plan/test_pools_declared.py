"""Warm pools declared in the manifest (``pools:``, ``pool:``): the spares the desired
state holds, what a pooled VM takes from its pool, and where a bad one is refused
(FILE:LINE:COL) (issue 29, item 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.apply.reconcile import mass_delete_problem
from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.observed import Observation
from sand.plan import Action, make_plan
from sand.plan.pools import with_pools
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired, stale_marker

POOLED = MANIFEST.replace("defaults:", "pools:\n  agents: {warm: 2, memory: 4GiB}\ndefaults:") + (
    "  - name: agent-4\n    pool: agents\n    secrets: []\n"
)


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def test_a_pool_is_its_spares_in_the_desired_state_with_nothing_per_vm() -> None:
    vms = {vm.name: vm for vm in desired(POOLED).vms}
    spares = [vm for vm in vms.values() if vm.spare]
    assert [s.name for s in spares] == ["agents-spare-1", "agents-spare-2"]
    for spare in spares:
        assert spare.pool == "agents" and spare.spare_of == "agents"
        assert spare.backend == "pve" and spare.memory == 4 * 2**30
        assert not spare.repos and not spare.secrets and not spare.preserve
        assert spare.expires is None and spare.idle is None and spare.state == "running"
    agent = vms["agent-4"]
    assert agent.pool == "agents" and not agent.spare and agent.spare_of == ""
    assert agent.memory == 4 * 2**30  # the pool's
    # Made from its pool: a later change of the pool's image never replaces it.
    assert agent.infra()["image"] == "pool:agents"
    other = desired(POOLED.replace("warm: 2, memory: 4GiB", "warm: 2, image: '9001'"))
    assert {v.name: v for v in other.vms}["agent-4"].fingerprint != agent.fingerprint  # memory
    again = desired(POOLED.replace("warm: 2, memory: 4GiB", "warm: 2, memory: 4GiB, image: '9001'"))
    moved = {v.name: v for v in again.vms}
    assert moved["agent-4"].fingerprint == agent.fingerprint
    assert moved["agents-spare-1"].fingerprint != vms["agents-spare-1"].fingerprint


def test_a_pooled_vm_leaves_its_image_and_sizes_to_the_pool() -> None:
    text = POOLED + "    cpus: 8\n"
    line = len(text.splitlines())
    assert errors_of(text) == [
        f"m.yaml:{line}:11: VM 'agent-4' claims a spare of pool 'agents': its cpus is the "
        "pool's (set it on the pool, or leave out `pool`)"
    ]


def test_an_unknown_pool_a_spares_name_and_another_backend_are_refused() -> None:
    text = POOLED.replace("pool: agents", "pool: agentz")
    line = text.splitlines().index("    pool: agentz") + 1
    assert errors_of(text) == [f"m.yaml:{line}:11: unknown pool 'agentz' (defined: agents)"]
    text = POOLED + "  - name: agents-spare-7\n"
    line = len(text.splitlines())
    (problem,) = errors_of(text)
    assert problem.startswith(f"m.yaml:{line}:11: VM name 'agents-spare-7' is a spare's name")
    text = POOLED.replace("pool: agents\n", "pool: agents\n    backend: laptop\n")
    (problem,) = [p for p in errors_of(text) if "claimed where it is" in p]
    line = len(text.splitlines()) - text.splitlines()[::-1].index("    backend: laptop")
    assert problem.startswith(f"m.yaml:{line}:14: ")


def test_a_pool_on_lima_keeps_its_spares_there() -> None:
    text = POOLED.replace("{warm: 2, memory: 4GiB}", "{warm: 1, backend: laptop, image: debian-12}")
    vms = {vm.name: vm for vm in desired(text).vms}
    assert vms["agents-spare-1"].backend == vms["agent-4"].backend == "laptop"


def _planned(text: str = POOLED, drop: tuple[str, ...] = ("agent-4",)):
    """The plan of ``text`` against a fleet converged to it but for ``drop`` (absent)."""
    state = desired(text)
    obs = converged(state)
    obs["pve"] = Observation("pve", tuple(v for v in obs["pve"].vms if v.name not in drop))
    return with_pools(make_plan(state, obs, POLICIES), state, POLICIES)


def test_a_new_pooled_vm_claims_the_first_ready_spare_and_its_slot_refills() -> None:
    plan = _planned()
    by_vm = {c.vm: c for c in plan.changes}
    agent, spare = by_vm["agent-4"], by_vm["agents-spare-1"]
    assert agent.claims == "agents-spare-1" and agent.claim is not None
    assert spare.refill == (1, 2) and spare.observed is None and spare.identity is None
    assert by_vm["agents-spare-2"].refill is None and not by_vm["agents-spare-2"].acts
    # A spare not in sync (here: never converged) is not claimed: made as any VM.
    state = desired(POOLED)
    obs = converged(state)
    vms = [stale_marker(v) if v.name.startswith("agents-spare") else v for v in obs["pve"].vms]
    obs["pve"] = Observation("pve", tuple(v for v in vms if v.name != "agent-4"))
    stale = with_pools(make_plan(state, obs, POLICIES), state, POLICIES)
    agent = {c.vm: c for c in stale.changes}["agent-4"]
    assert agent.claims is None and "no spare of pool agents is ready" in agent.reasons[-1]


def test_a_claimed_spare_still_counts_for_the_mass_delete_guard() -> None:
    plan = _planned()
    # Two of the fleet's four VMs (the two others, one of them the spare claimed) go.
    doomed = {"a", "b"}
    changes = tuple(
        replace(c, action=Action.DELETE, desired=None) if c.vm in doomed else c
        for c in plan.changes
    )
    assert mass_delete_problem(replace(plan, changes=changes)) is None
