"""PVE 8 and 9 (the rig's --pve-version profile): sand asks each for the privileges it has,
reads the version once, and works the same on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sand.state.journal import Journal
from tests.backends.proxmox.helpers import apply, plan, state_of
from tests.backends.proxmox.test_doctor_cli import doctor
from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("pve_version", [8, 9])


@BOTH
def test_doctor_is_ok_with_a_token_scoped_for_that_version(
    fakepve_factory: Any, tmp_path: Path, pve_version: int
) -> None:
    rig: FakePveRig = fakepve_factory(pve_version=pve_version)
    res = doctor(rig, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["pve: ok"]
    assert rig.count("GET", "/version") == 1


@pytest.mark.parametrize(("pve_version", "agent"), [(8, "VM.Monitor"), (9, "VM.GuestAgent.Audit")])
def test_doctor_names_the_agent_privilege_of_that_version(
    fakepve_factory: Any, tmp_path: Path, pve_version: int, agent: str
) -> None:
    rig: FakePveRig = fakepve_factory(pve_version=pve_version, acl="none")
    rig.run(rig.grant_sand_privileges, rig.token_id, without=[agent])
    res = doctor(rig, tmp_path)
    assert res.returncode == 1
    assert res.stdout.splitlines() == [f"pve: error: missing privilege {agent} on /pool/sand"]


@BOTH
async def test_create_reach_and_noop_on_each_version(
    fakepve_factory: Any, pve_version: int, tmp_path: Path
) -> None:
    rig: FakePveRig = fakepve_factory(pve_version=pve_version)
    backend = rig.make_backend()
    state = state_of(rig, [{"name": "a", "memory": "1GiB"}])
    _, result = await apply(backend, state, Journal(tmp_path / "j.jsonl"))
    assert result.ok, result
    (vm,) = rig.vms()
    rig.set_agent_ip(vm.vmid, "192.0.2.10")
    desired = rig.desired([{"name": "a", "memory": "1GiB"}])[0]
    observed = (await backend.observe([desired])).vms[0]
    # The agent's answer: VM.Monitor on 8, VM.GuestAgent.Audit on 9 (the rig's token).
    assert (await backend.endpoint(desired, observed)).host == "192.0.2.10"
    rig.clear_log()
    again = await plan(backend, state)
    assert not again.has_changes
    # A no-op plan costs the listing alone: no version read, no preflight.
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]
    await backend.close()
