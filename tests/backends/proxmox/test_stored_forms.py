"""The forms PVE stores and answers with (tests/fakepve_rig/forms.py), and sand reading them.

First the layer itself over raw HTTP, on both profiles: typed values (``check_type``),
drives printed again (``print_drive``, ``format_size``), cloud-init drives allocated by
PVE's name (``create_disks``), a MAC made for a NIC written without one (``parse_net``),
``maxdisk`` of the boot disk (``bootdisk_size``). Then sand through it: a disk size PVE
keeps in bytes, a template with neither a NIC nor a cloud-init drive.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import apply, managed, plan, state_of
from tests.backends.proxmox.test_fidelity import Api
from tests.fakepve_rig.rig import FakePveRig

MAC = re.compile(r"^virtio=BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2},bridge=vmbr0$")
# A disk of 2 GiB and one 512-byte sector: format_size finds no unit that divides it.
ODD_SIZE = (2 << 30) + 512


def seeded(make: Any, major: int, status: str, **kwargs: Any) -> tuple[FakePveRig, Api]:
    """A rig of that profile with VM 100 ``a`` (``status``), and raw HTTP to it."""
    rig = make(pve_version=major, **kwargs)
    rig.seed_vm(100, "a", status=status, memory_mib=2048)
    return rig, Api(rig)


def _without_cloudinit(rig: FakePveRig, vmid: int) -> None:
    rig.run(lambda: rig.pve.vm(vmid).config.pop("ide2"))


@pytest.mark.parametrize("major", [8, 9])
def test_integers_and_booleans_are_answered_as_numbers(fakepve_factory: Any, major: int) -> None:
    _, api = seeded(fakepve_factory, major, "running")
    # Written as form text; the running VM keeps cores and numa pending, onboot at once.
    written = {"cores": "3", "numa": "1", "onboot": "true", "cpulimit": "1.5", "memory": "4096"}
    assert api.call("PUT", "nodes/pve1/qemu/100/config", **written)[0] == 200
    config = api.call("GET", "nodes/pve1/qemu/100/config")[1]
    got = {k: config[k] for k in ("cores", "numa", "onboot", "cpulimit", "memory", "sockets")}
    assert got == {
        "cores": 3, "numa": 1, "onboot": 1, "cpulimit": "1.5", "memory": "4096", "sockets": 1,
    }  # fmt: skip
    current = api.call("GET", "nodes/pve1/qemu/100/config", current=1)[1]
    assert (current["cores"], current["onboot"]) == (2, 1)
    pending = {i["key"]: i for i in api.call("GET", "nodes/pve1/qemu/100/pending")[1]}
    assert (pending["cores"]["value"], pending["cores"]["pending"]) == (2, 3)
    assert pending["numa"]["pending"] == 1 and pending["agent"]["value"] == "1"


@pytest.mark.parametrize("major", [8, 9])
def test_drive_sizes_are_stored_as_format_size_prints_them(
    fakepve_factory: Any, major: int
) -> None:
    rig, api = seeded(fakepve_factory, major, "stopped")
    disk = "local-lvm:vm-100-disk-0,size=8589934592,discard=on"
    assert api.call("PUT", "nodes/pve1/qemu/100/config", scsi0=disk)[0] == 200
    assert rig.vm(100).config["scsi0"] == "local-lvm:vm-100-disk-0,discard=on,size=8G"
    rows = {r["vmid"]: r for r in api.call("GET", "cluster/resources", type="vm")[1]}
    assert rows[100]["maxdisk"] == 8 << 30
    # A size with no unit is bytes: maxdisk says so, in the listing and the VM's status.
    odd = f"local-lvm:vm-100-disk-0,size={ODD_SIZE}"
    assert api.call("PUT", "nodes/pve1/qemu/100/config", scsi0=odd)[0] == 200
    assert rig.vm(100).config["scsi0"] == odd
    rows = {r["vmid"]: r for r in api.call("GET", "cluster/resources", type="vm")[1]}
    assert rows[100]["maxdisk"] == ODD_SIZE
    assert api.call("GET", "nodes/pve1/qemu/100/status/current")[1]["maxdisk"] == ODD_SIZE


def test_maxdisk_is_the_boot_disks_size(fakepve_server: FakePveRig) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    extra = {"virtio0": "local-lvm:vm-100-disk-1,size=32G", "boot": "order=ide2;virtio0;scsi0"}
    rig.seed_vm(100, "a", status="stopped", config=extra)
    rows = {r["vmid"]: r for r in api.call("GET", "cluster/resources", type="vm")[1]}
    assert rows[100]["maxdisk"] == 32 << 30  # ide2 is the cloud-init CD-ROM: skipped
    rig.run(lambda: rig.pve.vm(100).config.pop("boot"))
    rows = {r["vmid"]: r for r in api.call("GET", "cluster/resources", type="vm")[1]}
    assert rows[100]["maxdisk"] == 0  # no boot order, no bootdisk: PVE reports none


@pytest.mark.parametrize("major", [8, 9])
def test_a_cloudinit_drive_is_allocated_by_pves_name(fakepve_factory: Any, major: int) -> None:
    rig, api = seeded(fakepve_factory, major, "stopped")
    _without_cloudinit(rig, 100)
    # update_vm_api's $check_drive_perms: VM.Config.Cloudinit and VM.Config.CDROM.
    status, message = api.call("PUT", "nodes/pve1/qemu/100/config", ide0="local-lvm:cloudinit")
    assert (status, message.strip()) == (403, "Permission check failed (/vms/100, VM.Config.CDROM)")
    rig.grant(rig.token_id, "/pool/sand", "VM.Config.CDROM")
    assert api.call("PUT", "nodes/pve1/qemu/100/config", ide0="local-lvm:cloudinit")[0] == 200
    assert rig.vm(100).config["ide0"] == "local-lvm:vm-100-cloudinit,media=cdrom"
    volumes = rig.run(lambda: dict(rig.pve.storages["local-lvm"]["volumes"]))
    assert volumes["vm-100-cloudinit"]["size"] == 4 << 20
    status, message = api.call("PUT", "nodes/pve1/qemu/100/config", ide1="local-lvm:cloudinit")
    assert (status, message.strip()) == (
        500, "ide1 - cloud-init drive is already attached at 'ide0'"
    )  # fmt: skip
    assert "ide1" not in rig.vm(100).config
    # A create allocates it by the same name (fakepve took the next vm-<id>-disk-<n>).
    made = {"ide2": "local-lvm:cloudinit", "scsi0": "local-lvm:1", "net0": "virtio,bridge=vmbr0"}
    assert api.call("POST", "nodes/pve1/qemu", vmid=101, pool="sand", **made)[0] == 200
    config = rig.vm(101).config
    assert config["ide2"] == "local-lvm:vm-101-cloudinit,media=cdrom"
    assert config["scsi0"] == "local-lvm:vm-101-disk-0,size=1G"
    assert MAC.match(config["net0"]), config["net0"]


@pytest.mark.parametrize("major", [8, 9])
def test_a_nic_written_without_a_mac_gets_one(fakepve_factory: Any, major: int) -> None:
    rig, api = seeded(fakepve_factory, major, "stopped")
    assert api.call("PUT", "nodes/pve1/qemu/100/config", net1="virtio,bridge=vmbr0")[0] == 200
    net1 = api.call("GET", "nodes/pve1/qemu/100/config")[1]["net1"]
    assert MAC.match(net1), net1
    # Written again with it, the MAC stays; the options are printed sorted.
    mac = net1.split(",")[0]
    again = f"bridge=vmbr0,{mac},firewall=1"
    assert api.call("PUT", "nodes/pve1/qemu/100/config", net1=again)[0] == 200
    assert rig.vm(100).config["net1"] == f"{mac},bridge=vmbr0,firewall=1"


async def test_sand_reads_a_disk_size_pve_keeps_in_bytes(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """A disk of 2 GiB + 512 bytes (an imported image's size) is listed as that; sand
    sees the disk it asked for within the storage's rounding, and plans nothing."""
    state = state_of(rig, [{"name": "dev", "disk": "2GiB"}])
    (vm,) = state.vms
    scsi0 = f"{rig.storage}:vm-120-disk-0,size={ODD_SIZE}"
    rig.seed_managed(vm, 120, config={"scsi0": scsi0})
    observed = managed((await backend.observe([vm])).vms)["dev"]
    assert observed.disk == 2 << 30
    assert not (await plan(backend, state)).actionable()


async def test_sand_finds_a_vm_whose_nic_and_cloudinit_drive_pve_made(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    """A template with neither net0 nor a cloud-init drive: sand writes ``virtio,bridge=…``
    and ``<storage>:cloudinit``; PVE makes the MAC and the drive, and sand finds the
    guest by that MAC and sees nothing left to change."""

    def strip() -> None:
        config = rig.pve.vm(rig.template_vmid).config
        config.pop("net0")
        config.pop("ide2")

    rig.run(strip)
    rig.grant(rig.token_id, f"/pool/{rig.pool}", "VM.Config.CDROM")  # the drive's write
    state = state_of(rig, [{"name": "dev", "user": "alice"}])
    await apply(backend, state, journal)
    (made,) = rig.vms_named("dev")
    assert MAC.match(made.config["net0"]), made.config["net0"]
    assert made.config["ide2"] == f"{rig.storage}:vm-{made.vmid}-cloudinit,media=cdrom"
    rig.set_agent_ip(made.vmid, "192.0.2.61")
    current = managed((await backend.observe(state.vms)).vms)["dev"]
    endpoint = await backend.endpoint(state.vms[0], current)
    assert (endpoint.host, endpoint.user) == ("192.0.2.61", "alice")
    assert not (await plan(backend, state)).actionable()
