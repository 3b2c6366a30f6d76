"""Parallel creates of one entry make one VM; clones are bounded; placement spreads."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from sand.backends.proxmox.errors import ProxmoxError
from sand.observed import ObservedVM
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_parallel_creates_of_one_entry_in_one_process_make_one_vm(
    rig: FakePveRig, journal: Journal
) -> None:
    rig.set_task_secs("qmclone", 20)  # 0.2 s real, holding lock: clone
    first, second = rig.make_backend(), rig.make_backend()
    vm = rig.desired([{"name": "dev"}])[0]
    made = await asyncio.gather(
        first.create(vm, journal), second.create(vm, journal), first.create(vm, journal)
    )
    assert len({m.identity for m in made}) == 1
    assert len(rig.vms_named("dev")) == 1 and len(rig.vms()) == 1
    assert rig.count("POST", contains="/clone") == 1
    assert journal.pending() == []
    await first.close()
    await second.close()


@pytest.mark.fakepve_rig(time_scale=0.01)
@pytest.mark.parametrize("lag", [0.0, 0.05, 0.25])
def test_two_processes_creating_one_entry_make_one_vm(
    rig: FakePveRig, tmp_path: Path, lag: float
) -> None:
    """Two sand runs (own event loops, own journals) race on one manifest entry. With no
    lag both get the same vmid and one clone is refused; with a short lag both clone and
    the later one removes its own; with a longer one the second adopts the first's."""
    rig.set_task_secs("qmclone", 20)
    vm = rig.desired([{"name": "dev"}])[0]
    start = threading.Barrier(2)
    results: dict[int, ObservedVM | BaseException] = {}

    def run(i: int) -> None:
        async def main() -> ObservedVM:
            backend = rig.make_backend()
            journal = Journal(tmp_path / f"journal-{i}.jsonl")
            try:
                start.wait()
                await asyncio.sleep(lag * i)
                made = await backend.create(vm, journal)
                assert journal.pending() == []
                return made
            finally:
                await backend.close()

        try:
            results[i] = asyncio.run(main())
        except BaseException as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    made = [results[0], results[1]]
    assert all(isinstance(m, ObservedVM) for m in made), made
    assert len({m.identity for m in made}) == 1  # type: ignore[union-attr]
    assert len(rig.vms_named("dev")) == 1 and len(rig.vms()) == 1


@pytest.mark.fakepve_rig(time_scale=0.01)
async def test_clones_run_at_most_clone_parallelism_at_once(
    rig: FakePveRig, journal: Journal
) -> None:
    rig.set_task_secs("qmclone", 15)
    backend = rig.make_backend(clone_parallelism=2)
    desired = rig.desired([{"name": f"dev-{i}"} for i in range(5)])
    peak = 0
    done = False

    async def watch() -> None:
        nonlocal peak
        while not done:
            cloning = rig.run(lambda: sum(1 for v in rig.pve.vms if v.lock == "clone"))
            peak = max(peak, cloning)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    await asyncio.gather(*(backend.create(vm, journal) for vm in desired))
    done = True
    await watcher
    assert peak == 2
    assert time.monotonic() - started >= 0.15 * 3  # three rounds of two clones
    assert len(rig.vms()) == 5
    await backend.close()


@pytest.mark.fakepve_rig(nodes=("pve1", "pve2"), shared_storage=True)
async def test_placement_spreads_over_online_nodes(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    desired = rig.desired([{"name": f"dev-{i}", "memory": "2GiB"} for i in range(4)])
    made = [await backend.create(vm, journal) for vm in desired]
    assert sorted(m.node or "" for m in made) == ["pve1", "pve1", "pve2", "pve2"]
    for m in made:
        fake = rig.vm(int(m.identity))
        assert fake is not None and fake.node == m.node and fake.status == "running"
    rig.run(rig.pve.set_node_offline, "pve2")
    late = rig.desired([{"name": "late"}])[0]
    assert (await backend.create(late, journal)).node == "pve1"
    # The template's node down: nothing can be cloned, and the error says why.
    rig.run(rig.pve.set_node_offline, "pve2", False)
    rig.run(rig.pve.set_node_offline, "pve1")
    with pytest.raises(
        ProxmoxError, match="template 'debian-13' is on node pve1, which is offline"
    ):
        await backend.create(rig.desired([{"name": "later"}])[0], journal)
    await backend.close()


@pytest.mark.fakepve_rig(nodes=("pve1", "pve2"), shared_storage=True)
async def test_a_pinned_node_is_used(rig: FakePveRig, journal: Journal) -> None:
    backend = rig.make_backend()
    vm = rig.desired([{"name": "pinned", "node": "pve2"}])[0]
    made = await backend.create(vm, journal)
    assert made.node == "pve2"
    assert rig.count("GET", "/nodes") == 0  # no placement needed
    await backend.close()
