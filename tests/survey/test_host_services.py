"""What this host serves its Proxmox VMs (the broker, the egress proxy) read by the plan:
a VM granted the broker, or registered at the proxy, on this host is delivered to again
when that process no longer runs (a restart of this host, a kill). The proxy is a real
listener process, killed as a restart leaves it; the broker's record names a dead one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sand.broker.store import Running, VMGrants, broker_dir, update_grants, write_running
from sand.desired import DesiredState
from sand.egress import registry
from sand.plan import make_plan
from sand.plan.model import Action, GuestAction
from sand.survey.host_services import BROKER_DOWN, PROXY_DOWN, services_lost
from tests.egress.test_checkup import port_closes
from tests.egress.test_listener import free_port
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired

BROKER = {"repositories": ["https://git.test/app.git"], "push": ["agent/*"]}


def _manifest() -> str:
    """The planner tests' manifest, its Proxmox backend with an egress proxy, and three
    VMs: one granted a brokered token, one whose domains go through the proxy, one with
    neither."""
    data = yaml.safe_load(MANIFEST)
    data["backends"] = {"pve": {**data["backends"]["pve"], "egress_proxy": "10.20.0.1:3128"}}
    data["defaults"] = {"backend": "pve", "provision": True}
    data["secrets"] = {
        "GH": {"from": {"env": "SAND_TEST_GH"}, "deliver": "broker", "broker": BROKER}
    }
    data["repos"] = {"app": {"url": BROKER["repositories"][0], "token": "GH", "path": "~/src/app"}}
    data["vms"] = [
        {"name": "brokered", "repos": ["app"]},
        {"name": "proxied", "egress": {"domains": ["allowed.test"], "ports": [443]}},
        {"name": "plain"},
    ]
    return yaml.safe_dump(data)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path / "state"
    registry.stop(registry.proxy_dir("demo", "pve"))


@pytest.fixture
def fleet() -> DesiredState:
    return desired(_manifest())


def _granted(vm: str, pid: int) -> None:
    directory = broker_dir("demo")
    update_grants(directory, vm, VMGrants("0" * 64, "10.0.0.5", (), "10.0.0.1"))
    write_running(directory, Running(pid, {"10.0.0.1": 40000}))


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(done.stdout)


def test_nothing_served_here_is_nothing_lost(fleet: DesiredState) -> None:
    assert services_lost("demo", fleet) == {}


def test_a_vm_granted_a_broker_that_no_longer_runs_is_delivered_to_again(
    fleet: DesiredState,
) -> None:
    _granted("brokered", _dead_pid())  # the record a restart of this host leaves
    assert services_lost("demo", fleet) == {"brokered": BROKER_DOWN}
    _granted("brokered", os.getpid())  # a live process, but not a broker: a reused pid
    assert services_lost("demo", fleet) == {"brokered": BROKER_DOWN}


def test_a_vm_behind_a_killed_proxy_is_delivered_to_again(fleet: DesiredState) -> None:
    listen = f"127.0.0.1:{free_port()}"
    registry.register("demo", "pve", "proxied", "10.0.0.6", listen)
    assert services_lost("demo", fleet) == {}  # it runs
    running = registry.listener_of("demo", "pve")
    assert running is not None
    os.kill(running[0], signal.SIGKILL)
    assert port_closes(int(listen.rpartition(":")[2]))
    assert services_lost("demo", fleet) == {"proxied": PROXY_DOWN}


def test_the_plan_delivers_to_a_vm_without_secret_values_what_it_lost(
    fleet: DesiredState,
) -> None:
    """A VM that uses no secret has no stamp to compare, yet a delivery is what starts
    the proxy again and registers it; the others stay as they are."""
    observed = converged(fleet)
    lost = {"plain": PROXY_DOWN}
    plan = make_plan(fleet, observed, POLICIES, secret_stamps={}, secrets_lost=lost)
    (change,) = [c for c in plan.changes if c.vm == "plain"]
    assert (change.action, change.guest, change.reasons) == (
        Action.NOOP,
        GuestAction.SECRETS,
        (PROXY_DOWN,),
    )
    assert all(c.guest is GuestAction.NONE for c in plan.changes if c.vm != "plain")
