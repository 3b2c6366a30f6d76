"""What a create costs on Lima, ``limactl`` call by call (the stand-in's invocation log):
after the plan's observation, no call that asks what sand already knows. The name is
known free from the observation (no inspect first); the marker is a file written
beside the instance, not a call; the one ``list`` after the start reads what only the
running instance can tell (its SSH port)."""

from __future__ import annotations

from sand.backends.lima.backend import LimaBackend
from sand.state.journal import Journal
from tests.backends.lima.conftest import desired
from tests.limactl_standin import StandIn


async def test_a_create_after_the_observation_costs_these_limactl_calls(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vms = desired("  - name: vm1\n").vms
    await backend.observe(vms)  # as apply does: the plan's observation comes first
    standin.clear_log()
    await backend.create(vms[0], journal)
    assert standin.commands() == ["create", "start", "list"]
