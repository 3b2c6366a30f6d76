"""What a create costs on Lima, ``limactl`` call by call (the stand-in's invocation log):
after the plan's observation, no call that asks what sand already knows. The name is
known free from the observation (no inspect first); the marker is a file written
beside the instance, not a call; the one ``list`` after the start reads what only the
running instance can tell (its SSH port), shared by the creates of a wave."""

from __future__ import annotations

import asyncio
from collections import Counter

from sand.backends.lima.backend import LimaBackend
from sand.state.journal import Journal
from tests.backends.lima.conftest import MakeBackend, desired
from tests.limactl_standin import StandIn


async def test_a_create_after_the_observation_costs_these_limactl_calls(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vms = desired("  - name: vm1\n").vms
    await backend.observe(vms)  # as apply does: the plan's observation comes first
    standin.clear_log()
    await backend.create(vms[0], journal)
    assert standin.commands() == ["create", "start", "list"]


async def test_a_wave_of_creates_shares_the_reads_after_their_starts(
    standin: StandIn, make_backend: MakeBackend, journal: Journal
) -> None:
    # Each create reads its instance once started (the SSH port Lima picked); creates
    # whose starts end together share one `limactl list` naming them all.
    backend = make_backend(clone_parallelism=6)
    standin.configure(start_delay=1.0)  # the starts overlap and end together
    vms = desired("".join(f"  - name: w{i}\n" for i in range(6))).vms
    await backend.observe(vms)
    standin.clear_log()
    await asyncio.gather(*(backend.create(vm, journal) for vm in vms))
    calls = Counter(standin.commands())
    lists = calls.pop("list")
    # A create and a start per VM: nothing else.
    assert calls == {"create": 6, "start": 6}, calls
    assert 1 <= lists < 6, f"{lists} listings for 6 creates"
