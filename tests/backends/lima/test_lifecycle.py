"""Create, observe, update, protect and delete against the limactl stand-in."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sand.backends.capabilities import Mutability
from sand.backends.lima import FIELD_POLICY, LimaBackend
from sand.backends.protocol import Backend
from sand.errors import BackendError
from sand.manifest.backends.lima import RESERVED_PREFIX as RESERVED_LIMA_PREFIX
from sand.observed import Ownership
from sand.state.journal import Journal
from tests.backends.lima.conftest import MakeBackend, build_golden, desired, golden_desired, one
from tests.limactl_standin import StandIn


def _mutating(standin: StandIn) -> list[str]:
    return [
        c
        for c in standin.commands()
        if c in ("create", "clone", "start", "stop", "edit", "delete", "protect", "unprotect")
    ]


async def test_backend_satisfies_the_protocol(backend: LimaBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.type == "lima"
    assert backend.name == "laptop"
    assert backend.clone_parallelism == 2


async def test_create_starts_marks_and_reports_the_instance(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one("  - name: vm1\n    ports: [{guest: 3000, host: 13000}]\n")
    await backend.observe([vm])
    created = await backend.create(vm, journal)

    assert created.ownership is Ownership.MANAGED
    assert created.power == "running"
    assert (created.cpus, created.memory, created.disk) == (2, 4 << 30, 20 << 30)
    assert created.ports == ((3000, 13000),)
    assert created.marker is not None and created.marker.fingerprint == ""
    assert created.marker.identity == "vm1" and created.marker.image == "debian-12"
    assert created.findings == ()
    marker = json.loads((standin.instance_dir("vm1") / "sand-marker.json").read_text())
    assert marker["identity"] == "vm1" and marker["project"] == "demo"
    assert (standin.instance_dir("vm1") / "sand-marker.json").stat().st_mode & 0o077 == 0
    # A single VM is created directly (no base), and always started.
    assert _mutating(standin) == ["create", "start"]
    assert all(i.tty_false for i in standin.invocations())
    assert journal.pending() == []


async def test_noop_observe_is_exactly_one_list(
    standin: StandIn, backend: LimaBackend, make_backend: MakeBackend, journal: Journal
) -> None:
    state = desired("".join(f"  - name: vm{i}\n" for i in range(5)))
    await backend.observe(state.vms)
    for vm in state.vms:
        current = await backend.create(vm, journal)
        await backend.mark_converged(vm, current)
    standin.clear_log()

    fresh = make_backend()  # a new reconcile: a new backend object
    obs = await fresh.observe(state.vms)

    assert standin.commands().count("list") == 1
    assert [c for c in standin.commands() if c] == ["list"]  # plus one --version probe
    assert obs.requests == 1 and obs.unknown_reason is None
    by_name = {v.name: v for v in obs.vms}
    assert sorted(by_name) == [vm.name for vm in state.vms]
    for vm in state.vms:
        assert by_name[vm.name].fingerprint == vm.fingerprint
        assert by_name[vm.name].deep

    standin.clear_log()
    await fresh.observe(state.vms)  # the version probe runs once per backend
    assert standin.commands() == ["list"]


async def test_vms_sharing_an_image_are_created_from_it_without_a_base(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = desired("".join(f"  - name: vm{i}\n" for i in range(4)))
    await backend.observe(state.vms)
    results = await asyncio.gather(*(backend.create(vm, journal) for vm in state.vms))

    # No clone-source base: a clone copies as much as a create does (create.py).
    assert standin.instances() == ["vm0", "vm1", "vm2", "vm3"]
    cmds = _mutating(standin)
    assert cmds.count("create") == 4 and cmds.count("clone") == 0
    assert all(r.ownership is Ownership.MANAGED and r.power == "running" for r in results)
    assert len({r.details["uid"] for r in results}) == 4


async def test_the_first_creates_of_a_new_lima_home_do_not_race_for_limas_own_key(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    # The real Lima makes _config/user at the first create with no lock: two first creates
    # at once, and one failed "_config/user already exists" (the real-Lima tier's pool).
    standin.configure(keygen_delay=0.5)
    state = desired("".join(f"  - name: vm{i}\n" for i in range(3)))
    await backend.observe(state.vms)
    results = await asyncio.gather(*(backend.create(vm, journal) for vm in state.vms))
    assert standin.instances() == ["vm0", "vm1", "vm2"]
    assert all(r.power == "running" for r in results)


async def test_vms_cloned_from_a_golden_base_carry_their_own_identity(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("".join(f"  - name: vm{i}\n" for i in range(3)))
    await backend.observe(state.vms)
    built = await build_golden(backend, state.vms[0], journal)
    standin.clear_log()
    results = await asyncio.gather(
        *(backend.create(vm, journal, from_base=True) for vm in state.vms)
    )

    cmds = _mutating(standin)
    assert cmds.count("create") == 0 and cmds.count("clone") == 3
    # The base is never started by a clone, never shown as a VM.
    assert "start" not in [i.command for i in standin.invocations() if built.identity in i.argv]
    obs = await backend.observe(state.vms)
    assert sorted(v.name for v in obs.vms) == ["vm0", "vm1", "vm2"]
    assert [b.identity for b in obs.bases] == [built.identity]
    assert len({r.details["uid"] for r in results}) == 3
    # Each clone carries its own identity in param, the base's is not left behind.
    for r in results:
        assert r.marker is not None and r.marker.identity == r.name
        assert standin.read_yaml(r.name)["param"]["sandInstance"] == r.name


async def test_field_policy() -> None:
    assert FIELD_POLICY["image"] is Mutability.REPLACE
    assert FIELD_POLICY["disk"] is Mutability.GROW_ONLY
    assert FIELD_POLICY["cpus"] is Mutability.RESTART
    assert FIELD_POLICY["memory"] is Mutability.RESTART
    assert FIELD_POLICY["ports"] is Mutability.RESTART
    assert FIELD_POLICY["state"] is Mutability.IN_PLACE
    assert FIELD_POLICY["protect"] is Mutability.IN_PLACE
    # Lima instance names are directories: unique on the host, which the planner reads.
    assert LimaBackend.capabilities.field_policy is FIELD_POLICY
    assert LimaBackend.capabilities.unique_names


async def test_update_in_place_restarts_and_edits(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    standin.clear_log()

    bigger = one(
        "  - name: vm1\n    cpus: 4\n    memory: 6GiB\n    disk: 30GiB\n"
        "    ports: [{guest: 8080, host: 18080}]\n"
    )
    after = await backend.update(bigger, current, ["cpus", "memory", "disk", "ports"], journal)

    assert _mutating(standin) == ["stop", "edit", "start"]
    assert (after.cpus, after.memory, after.disk) == (4, 6 << 30, 30 << 30)
    assert after.ports == ((8080, 18080),)
    assert after.power == "running" and after.findings == ()
    assert journal.pending() == []


async def test_update_state_and_protect_in_place(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    standin.clear_log()

    stopped = replace(vm, state="stopped")
    current = await backend.update(stopped, current, ["state"], journal)
    assert current.power == "stopped" and _mutating(standin) == ["stop"]

    protected = replace(stopped, protect=True)
    current = await backend.update(protected, current, ["protect"], journal)
    assert current.protect and (standin.instance_dir("vm1") / "protected").exists()

    # A config change on a stopped VM edits without starting it.
    standin.clear_log()
    more = replace(protected, cpus=3)
    current = await backend.update(more, current, ["cpus"], journal)
    assert _mutating(standin) == ["edit"] and current.cpus == 3 and current.power == "stopped"

    unprotected = replace(more, protect=False, state="running")
    current = await backend.update(unprotected, current, ["protect", "state"], journal)
    assert not current.protect and current.power == "running"


async def test_image_and_disk_shrink_are_not_updated_in_place(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    standin.clear_log()
    with pytest.raises(BackendError, match="forces replacement"):
        await backend.update(replace(vm, image="ubuntu-24.04"), current, ["image"], journal)
    with pytest.raises(BackendError, match="cannot shrink"):
        await backend.update(replace(vm, disk=10 << 30), current, ["disk"], journal)
    assert _mutating(standin) == []


async def test_delete_removes_a_managed_instance(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    await backend.delete(current, journal)
    assert "vm1" not in standin.instances()
    assert journal.pending() == []
    # Deleting what is already gone is a no-op.
    await backend.delete(current, journal)


async def test_delete_refuses_protected_and_foreign_instances(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one("  - name: vm1\n    protect: true\n")
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    assert current.protect and (standin.instance_dir("vm1") / "protected").exists()
    with pytest.raises(BackendError, match="protected"):
        await backend.delete(current, journal)

    # Protected behind sand's back after it was observed unprotected: still refused.
    standin.make_instance("other", {"cpus": 1})
    await backend.update(replace(vm, protect=False), current, ["protect"], journal)
    obs = await backend.observe([vm])
    current = next(v for v in obs.vms if v.name == "vm1")
    standin.run("protect", "vm1")
    with pytest.raises(BackendError, match="protected"):
        await backend.delete(current, journal)

    human = next(v for v in obs.vms if v.name == "other")
    assert human.ownership is Ownership.UNMANAGED
    with pytest.raises(BackendError, match="unmanaged"):
        await backend.delete(human, journal)
    assert sorted(standin.instances()) == ["other", "vm1"]


async def test_ownership_copied_other_project_and_unmanaged(
    standin: StandIn, backend: LimaBackend, make_backend: MakeBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: vm1\n")
    await backend.observe(state.vms)
    base = (await build_golden(backend, state.vms[0], journal)).identity
    vm1 = await backend.create(state.vms[0], journal, from_base=True)
    await backend.mark_converged(state.vms[0], vm1)
    await backend.update(state.vms[0], vm1, [], journal)  # no fields: nothing to do
    # A person copies a managed instance (and the base): markers come along.
    standin.run("stop", "vm1")
    standin.run("clone", "vm1", "mine")
    standin.run("clone", base, "from-base")
    standin.make_instance("plain-human", {"cpus": 1})
    other = make_backend(project="other")
    other_vm = desired("  - name: theirs\n", project="other").vms[0]
    await other.observe([other_vm])
    await other.create(other_vm, journal)

    obs = await backend.observe(state.vms)
    own = {v.name: v.ownership for v in obs.vms}
    assert own == {
        "vm1": Ownership.MANAGED,
        "mine": Ownership.COPIED,
        "from-base": Ownership.COPIED,
        "plain-human": Ownership.UNMANAGED,
        "theirs": Ownership.OTHER_PROJECT,
    }
    assert [v.name for v in obs.managed()] == ["vm1"]
    copied = next(v for v in obs.vms if v.name == "mine")
    with pytest.raises(BackendError, match="copied"):
        await backend.delete(copied, journal)


async def test_an_instance_with_the_name_is_never_overwritten(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    standin.make_instance("vm1", {"cpus": 1})
    vm = one()
    await backend.observe([vm])
    with pytest.raises(BackendError, match="already exists"):
        await backend.create(vm, journal)
    assert standin.read_yaml("vm1") == {"cpus": 1}


async def test_endpoint_from_ssh_config(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    ep = await backend.endpoint(vm, current)
    assert ep.host == "127.0.0.1"
    assert ep.port == int(current.details["ssh_port"]) and ep.port > 0
    assert ep.user == "claude"
    assert ep.identity == str(standin.lima_home / "_config" / "user")
    assert ep.host_key_policy == "pin"
    # The pin follows the guest's boot (a new host key at every start).
    assert ep.host_key_family == f"lima-vm1.{current.details['uid']}"
    assert ep.host_key_alias == f"{ep.host_key_family}.boot-{current.details['boot']}"
    assert current.details["boot"].replace("-", "").isdigit()
    assert ep.jump is None


async def test_endpoint_of_an_instance_backed_by_a_real_guest(
    standin: StandIn, backend: LimaBackend, journal: Journal, tmp_path: Path
) -> None:
    key = tmp_path / "client_ed25519"
    key.write_text("key")
    standin.back_with_guest("vm1", address="10.213.0.9", port=22, user="claude", identity=str(key))
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    ep = await backend.endpoint(vm, current)
    assert (ep.host, ep.port, ep.user, ep.identity) == ("10.213.0.9", 22, "claude", str(key))


async def test_endpoint_refuses_a_stopped_instance(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    current = await backend.update(replace(vm, state="stopped"), current, ["state"], journal)
    with pytest.raises(BackendError, match="running"):
        await backend.endpoint(vm, current)


async def test_bases_are_never_vms(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: a\n  - name: b\n")
    await backend.observe(state.vms)
    built = await build_golden(backend, state.vms[0], journal)
    for vm in state.vms:
        await backend.create(vm, journal, from_base=True)
    obs = await backend.observe([])  # nothing desired: the base is still not a VM
    assert sorted(v.name for v in obs.vms) == ["a", "b"]
    assert all(not v.name.startswith(RESERVED_LIMA_PREFIX) for v in obs.vms)
    assert [(b.identity, b.made) for b in obs.bases] == [(built.identity, ("a", "b"))]
