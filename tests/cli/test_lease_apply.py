"""The lease as ``sand apply`` takes it: never for a plan or a no-op (which stay one
listing), before the first change otherwise, and for a project on several backends in
one order, by backend name."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from sand.apply.lease import ProjectLeases
from sand.backends.lease import LeaseHolder
from sand.project import open_session
from tests.cli.helpers import Sand
from tests.limactl_standin import StandIn


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def test_a_plan_and_a_no_op_apply_take_no_lease_and_list_once(sand: Sand, fakepve_server) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "n-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (lease,) = rig.lease_vms()  # the change took it (and made it, the first time)
    for command in (("plan",), ("apply", "--auto-approve"), ("status",)):
        rig.clear_log()
        proc = sand.run(*command)
        assert proc.returncode == 0, proc.stderr
        lease_reads = rig.count(path=f"/nodes/pve1/qemu/{lease.vmid}/config")
        if command == ("status",):
            # status shows who holds it: the listing and one read of the lease.
            assert (len(rig.log), lease_reads) == (2, 1)
        else:
            assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]


@pytest.mark.real_clock  # --lease-wait waits while another holds it
def test_apply_can_wait_for_a_busy_lease(sand: Sand, fakepve_server) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "n-1"}]))
    other = rig.make_backend()
    held, release = threading.Event(), threading.Event()

    async def hold() -> None:
        async with other.lease(LeaseHolder.here(command="elsewhere"), ttl=30):
            held.set()
            await asyncio.to_thread(release.wait, 120)
        await other.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    assert held.wait(30)
    try:
        refused = sand.run("apply", "--auto-approve")
        assert refused.returncode == 1 and "is being applied by" in refused.stderr
        assert rig.vms() == []
        env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1"}
        waiting = subprocess.Popen(
            [sys.executable, "-m", "sand", "apply", "--auto-approve", "--lease-wait", "60"],
            cwd=sand.workdir,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert waiting.stderr is not None
        first = waiting.stderr.readline()  # it says so, and waits
        assert first.startswith("Waiting for the lease: project demo is being applied by")
        # It keeps asking for the lease (two more reads of it), and writes nothing meanwhile.
        (lease,) = rig.lease_vms()
        asked = len(rig.requests("GET", contains=f"/qemu/{lease.vmid}/"))
        deadline = time.monotonic() + 30
        while len(rig.requests("GET", contains=f"/qemu/{lease.vmid}/")) < asked + 2:
            assert time.monotonic() < deadline and waiting.poll() is None
            time.sleep(0.02)
        assert rig.vms() == [] and waiting.poll() is None
        release.set()
        assert waiting.wait(60) == 0, waiting.stderr.read()
        assert [vm.name for vm in rig.vms()] == ["n-1"]
    finally:
        release.set()
        holder.join(30)


def test_the_leases_of_several_backends_are_taken_in_name_order(
    tmp_path, fakepve_server, monkeypatch
) -> None:
    standin = StandIn.create(tmp_path / "standin")
    standin.configure(require_tty_false=True)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", standin.path)
    data = fakepve_server.manifest([])
    data["backends"]["laptop"] = {
        "type": "lima",
        "lima_home": str(standin.lima_home),
        "limactl": str(standin.executable),
    }
    sand = Sand(tmp_path)
    session = open_session(sand.write(data), lock=False)

    async def take() -> dict[str, float]:
        try:
            async with ProjectLeases(session, LeaseHolder.here(command="both")) as leases:
                await leases.take(["pve", "laptop"])  # asked in any order
                held = {}
                for name, backend in session.backends.items():
                    record = await backend.lease_record()
                    assert record is not None and record.held()
                    held[name] = record.since
                return held
        finally:
            await session.close()

    since = asyncio.run(take())
    assert since["laptop"] <= since["pve"]  # "laptop" sorts first: taken first
    assert (standin.lima_home / "_sand" / "lease-demo.lock").exists()
    assert os.environ["SAND_STATE_DIR"] == str(tmp_path / "state")
