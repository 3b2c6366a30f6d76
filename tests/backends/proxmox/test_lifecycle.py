"""Create, update, delete and mark converged, asserted on fakepve's state and request log."""

from __future__ import annotations

import urllib.parse
from dataclasses import replace
from pathlib import Path

import pytest

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.errors import ProxmoxError
from sand.observed import ObservedVM, Ownership
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import managed
from tests.fakepve_rig.rig import FakePveRig

GIB = 1 << 30


def form(body: bytes) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(body.decode()))


async def test_create_clones_into_the_pool_configures_and_starts(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev", "cpus": 3, "memory": "3GiB", "disk": "20GiB"}])[0]

    made = await backend.create(vm, journal)

    assert made.ownership is Ownership.MANAGED and made.fingerprint == ""
    assert (made.cpus, made.memory, made.disk, made.power) == (3, 3 * GIB, 20 * GIB, "running")
    fake = rig.vm(int(made.identity))
    assert fake is not None and fake.pool == "sand" and fake.status == "running"
    cfg = fake.config
    assert cfg["scsi0"].startswith(f"local-lvm:vm-{made.identity}-disk-0,")
    assert "size=20G" in cfg["scsi0"]
    assert (str(cfg["cores"]), str(cfg["sockets"]), str(cfg["memory"])) == ("3", "1", "3072")
    assert cfg["net0"].endswith(",bridge=vmbr0") and cfg["net0"].startswith("virtio=BC:24:11:")
    assert (cfg["ciuser"], cfg["ipconfig0"]) == ("claude", "ip=dhcp")
    pub = Path(str(rig.identity) + ".pub").read_text()
    assert urllib.parse.unquote(cfg["sshkeys"]).strip() == pub.strip()
    # The template's operator tag is kept next to sand's marker, as PVE sorts them.
    created = mk.parse_tags(cfg["tags"]).created_at
    assert cfg["tags"] == (
        f"golden;sand;sand-{made.identity}-new;sand-backend-pve;sand-created-{created};"
        "sand-project-demo"
    )
    described = desc.parse_description(cfg["description"])
    assert described is not None and (described.project, described.name) == ("demo", "dev")
    assert created > 0 and described.created_at == created
    assert fake.pending == {}
    # One full clone into pool and storage; the journal saw each step.
    clones = [b for m, p, b in rig.pve.requests if m == "POST" and p.endswith("/clone")]
    assert len(clones) == 1
    sent = form(clones[0])
    assert (sent["full"], sent["pool"], sent["storage"], sent["name"]) == (
        "1",
        "sand",
        "local-lvm",
        "dev",
    )
    assert "path" not in sent and sent["newid"] == made.identity
    assert journal.pending() == []
    records = [r for r in _records(journal) if r.get("phase") == "step"]
    steps = [r.get("step") for r in records if r.get("step") != "task"]
    assert steps == ["cloned", "configured", "resized", "started"]
    # Each task sand started is journalled with its UPID, as PVE handed it out.
    tasks = [str(r["upid"]).split(":")[5] for r in records if r.get("step") == "task"]
    assert tasks == ["qmclone", "resize", "qmstart"]


def _records(journal: Journal) -> list[dict[str, object]]:
    return list(journal._records())


async def test_update_memory_of_a_running_vm_in_place(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev", "memory": "2GiB"}])[0]
    made = await backend.create(vm, journal)
    await backend.mark_converged(vm, made)
    bigger = rig.desired([{"name": "dev", "memory": "4GiB"}])[0]
    current = managed((await backend.observe([bigger])).vms)["dev"]
    rig.clear_log()

    updated = await backend.update(bigger, current, ["memory"], journal)

    assert updated.identity == made.identity  # in place, not replaced
    assert (updated.memory, updated.power) == (4 * GIB, "running")
    fake = rig.vm(int(made.identity))
    assert fake is not None and str(fake.config["memory"]) == "4096" and fake.pending == {}
    posts = [r.path.rsplit("/", 1)[-1] for r in rig.requests("POST")]
    assert posts == ["shutdown", "start"]  # restart: the change is live, not left pending
    await backend.mark_converged(bigger, updated)
    rig.clear_log()
    again = managed((await backend.observe([bigger])).vms)["dev"]
    assert again.fingerprint == bigger.fingerprint and rig.count() == 1


async def test_cpus_of_a_stopped_vm_change_without_starting_it(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "cold", "cpus": 2, "state": "stopped"}])[0]
    rig.seed_managed(vm, 600)
    more = rig.desired([{"name": "cold", "cpus": 6, "state": "stopped"}])[0]
    current = managed((await backend.observe([more])).vms)["cold"]
    rig.clear_log()
    updated = await backend.update(more, current, ["cpus"], journal)
    assert (updated.cpus, updated.power) == (6, "stopped")
    assert rig.requests("POST") == []


async def test_disk_grows_in_place_and_never_shrinks(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev", "disk": "10GiB"}])[0]
    rig.seed_managed(vm, 610)
    grow = rig.desired([{"name": "dev", "disk": "30GiB"}])[0]
    current = managed((await backend.observe([grow])).vms)["dev"]
    updated = await backend.update(grow, current, ["disk"], journal)
    assert updated.disk == 30 * GIB and rig.requests("POST") == []  # no restart for a resize
    shrink = rig.desired([{"name": "dev", "disk": "5GiB"}])[0]
    with pytest.raises(ProxmoxError, match="cannot shrink"):
        await backend.update(shrink, updated, ["disk"], journal)


async def test_power_state_changes_in_place(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    rig.seed_managed(vm, 620)
    stop = rig.desired([{"name": "dev", "state": "stopped"}])[0]
    current = managed((await backend.observe([stop])).vms)["dev"]
    stopped = await backend.update(stop, current, ["state"], journal)
    assert stopped.power == "stopped"
    started = await backend.update(vm, stopped, ["state"], journal)
    assert started.power == "running"


async def test_protection_blocks_deletion_until_the_manifest_lifts_it(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "keep"}])[0]
    rig.seed_managed(vm, 630)
    guarded = rig.desired([{"name": "keep", "protect": True}])[0]
    current = managed((await backend.observe([guarded])).vms)["keep"]
    current = await backend.update(guarded, current, ["protect"], journal)
    assert current.protect and str(rig.vm(630).config["protection"]) == "1"  # type: ignore[union-attr]
    with pytest.raises(ProxmoxError, match="protection is set"):
        await backend.delete(current, journal)
    assert rig.vm(630) is not None
    # Memory may still change in place: the protection is sand's own.
    guarded_big = rig.desired([{"name": "keep", "protect": True, "memory": "16GiB"}])[0]
    current = await backend.update(guarded_big, current, ["memory"], journal)
    current = await backend.update(vm, current, ["protect"], journal)
    await backend.delete(current, journal)
    assert rig.vm(630) is None


async def test_protection_set_by_an_operator_is_never_overridden(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "pet"}])[0]
    rig.seed_managed(vm, 640)
    rig.run(rig.pve.vm(640).config.__setitem__, "protection", 1)  # set in the web UI
    changed = rig.desired([{"name": "pet", "cpus": 8}])[0]
    current = managed((await backend.observe([changed])).vms)["pet"]
    assert current.protect
    before = dict(rig.vm(640).config)  # type: ignore[union-attr]
    with pytest.raises(ProxmoxError, match="protection was set outside sand"):
        await backend.update(changed, current, ["cpus", "protect"], journal)
    with pytest.raises(ProxmoxError, match="protection is set"):
        await backend.delete(current, journal)
    assert rig.vm(640).config == before  # type: ignore[union-attr]
    # The manifest taking the protection over makes the VM sand's to change again.
    adopted = rig.desired([{"name": "pet", "cpus": 8, "protect": True}])[0]
    changed_vm = await backend.update(adopted, current, ["cpus"], journal)
    assert changed_vm.cpus == 8 and changed_vm.protect


async def test_delete_stops_and_purges(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "tmp"}])[0]
    made = await backend.create(vm, journal)
    volumes = rig.pve.storages["local-lvm"]["volumes"]
    assert any(f"vm-{made.identity}-" in v for v in volumes)
    rig.clear_log()
    await backend.delete(made, journal)
    assert rig.vm(int(made.identity)) is None
    assert not any(f"vm-{made.identity}-" in v for v in volumes)
    (delete,) = rig.requests("DELETE")
    assert delete.query == {"purge": "1", "destroy-unreferenced-disks": "1"}
    assert [r.path.rsplit("/", 1)[-1] for r in rig.requests("POST")] == ["stop"]
    assert journal.pending() == []


async def test_deleting_a_vm_that_is_already_gone_succeeds(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    # Regression: a VM deleted behind sand's back (or by a delete whose answer was lost)
    # was refused as "does not exist any more"; what a delete wants is already so.
    vm = rig.desired([{"name": "tmp"}])[0]
    made = await backend.create(vm, journal)
    current = managed((await backend.observe([vm])).vms)["tmp"]
    rig.destroy_by_hand(int(made.identity))
    rig.clear_log()
    await backend.delete(current, journal)
    assert rig.vm(int(made.identity)) is None and rig.vms_named("tmp") == []
    assert rig.count("DELETE") == 0 and rig.count("POST") == 0
    # The id was checked, not guessed: the listing, then /cluster/nextid for that vmid.
    (nextid,) = rig.requests("GET", "/cluster/nextid")
    assert nextid.query == {"vmid": made.identity}
    assert journal.pending() == []


async def test_a_vm_that_left_the_pool_unseen_is_not_taken_for_gone(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    # The pool token no longer sees it, but its id is taken: it is not deleted, and not
    # reported deleted either.
    vm = rig.desired([{"name": "kept"}])[0]
    rig.seed_managed(vm, 661)
    current = managed((await backend.observe([])).vms)["kept"]
    rig.leave_pool(661)
    with pytest.raises(ProxmoxError, match="still exists but has left pool 'sand'"):
        await backend.delete(current, journal)
    assert rig.vm(661) is not None and rig.count("DELETE") == 0
    assert journal.pending() == []


async def test_nothing_but_managed_vms_is_changed_or_deleted(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "x"}])[0]
    rig.seed_vm(700, "x")  # unmanaged
    rig.seed_managed(vm, 701, identity=555)  # a copy of VM 555's marker
    rig.seed_managed(vm, 702, lock="backup")
    obs = await backend.observe([])
    assert {o.identity for o in obs.vms} >= {"701", "702"}
    unmanaged = (await backend.observe([vm])).vms
    targets = [o for o in unmanaged if o.identity in ("700", "701", "702")]
    assert {o.identity: o.ownership for o in targets} == {
        "700": Ownership.UNMANAGED,
        "701": Ownership.COPIED,
        "702": Ownership.MANAGED,
    }
    before = {vmid: dict(rig.vm(vmid).config) for vmid in (700, 701, 702, 9000)}  # type: ignore[union-attr]
    for target in targets:
        with pytest.raises(ProxmoxError, match="refusing"):
            await backend.delete(target, journal)
        with pytest.raises(ProxmoxError, match="refusing"):
            await backend.update(vm, target, ["cpus"], journal)
        with pytest.raises(ProxmoxError, match="refusing"):
            await backend.mark_converged(vm, target)
    # Even an observation claiming ownership is checked against a fresh read.
    forged = ObservedVM("pve", "debian-13", "9000", Ownership.MANAGED, "stopped", node="pve1")
    with pytest.raises(ProxmoxError, match="refusing to delete VM 9000"):
        await backend.delete(forged, journal)
    with pytest.raises(ProxmoxError, match="it is a template"):
        await backend.delete(replace(forged, template=True), journal)
    after = {vmid: dict(rig.vm(vmid).config) for vmid in (700, 701, 702, 9000)}  # type: ignore[union-attr]
    assert after == before
    assert rig.count("DELETE") == 0 and rig.count("PUT") == 0


async def test_mark_converged_keeps_what_operators_wrote(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    fake = rig.vm(int(made.identity))
    assert fake is not None

    def operator_edits() -> None:
        fake.config["tags"] = fake.config["tags"] + ";Owner-Alice"
        fake.config["description"] = "Owner: alice\n\n" + fake.config["description"]

    rig.run(operator_edits)
    await backend.mark_converged(vm, made)
    cfg = fake.config
    assert "owner-alice" in cfg["tags"].split(";") and "golden" in cfg["tags"].split(";")
    assert f"sand-{made.identity}-{vm.fingerprint}" in cfg["tags"].split(";")
    assert cfg["tags"] == mk.join_tags(mk.split_tags(cfg["tags"]))
    assert cfg["description"].startswith("Owner: alice\n\n```sand\n")
    marker = desc.parse_description(cfg["description"])
    assert marker is not None and marker.fingerprint == vm.fingerprint
    assert marker.image == vm.image and marker.guest_fingerprint == vm.guest_fingerprint
    (put,) = [b for m, p, b in rig.pve.requests if m == "PUT" and p.endswith("/config")][-1:]
    assert "digest" in form(put)  # written against the config it read


@pytest.mark.fakepve_rig(acl="root")
async def test_a_vm_taken_out_of_the_pool_after_observation_is_not_deleted(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "kept"}])[0]
    rig.seed_managed(vm, 660)
    current = managed((await backend.observe([])).vms)["kept"]
    rig.leave_pool(660)  # an operator keeps it: the broad token still sees it
    before = dict(rig.vm(660).config)  # type: ignore[union-attr]
    with pytest.raises(ProxmoxError, match="it is unmanaged"):
        await backend.delete(current, journal)
    assert rig.vm(660) is not None and rig.vm(660).config == before  # type: ignore[union-attr]
    assert rig.count("DELETE") == 0 and journal.pending() == []
