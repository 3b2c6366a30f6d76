"""A template without a cloud-init drive: sand adds one to each clone, which a real PVE
lets only a token with ``VM.Config.CDROM`` (besides ``VM.Config.Cloudinit``) do
(qemu-server ``update_vm_api``'s ``$check_drive_perms``; tests/fakepve_rig/forms.py).
sand's role lacks it, so the plan blocks such a VM with both fixes and apply writes
nothing; granted, PVE allocates the drive by its own name and makes net0's MAC."""

from __future__ import annotations

import re

import pytest

from tests.cli.helpers import Sand
from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("pve_version", [8, 9])


def writes(rig: FakePveRig) -> list[str]:
    return [str(r) for r in rig.log if r.method in ("POST", "PUT", "DELETE")]


def _bare_template(rig: FakePveRig) -> None:
    """The template with neither a cloud-init drive nor a NIC (an operator's own image)."""

    def strip() -> None:
        config = rig.pve.vm(rig.template_vmid).config
        config.pop("ide2")
        config.pop("net0")

    rig.run(strip)


@BOTH
def test_a_template_without_a_cloudinit_drive_needs_cdrom_before_any_write(
    tmp_path, fakepve_factory, pve_version
):
    rig = fakepve_factory(pve_version=pve_version)
    _bare_template(rig)
    sand = Sand(tmp_path)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    plan = sand.run("plan")
    said = (
        "template 'debian-13' has no cloud-init drive",
        "`qm set 9000 --ide2 local-lvm:cloudinit`",
        "or grant VM.Config.CDROM",
    )
    assert plan.returncode == 1 and all(s in plan.stdout for s in said), plan.stdout
    rig.clear_log()
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert writes(rig) == [] and rig.vms() == []
    doctor = sand.run("doctor")
    assert doctor.returncode == 1 and said[0] in doctor.stdout, doctor.stdout

    rig.grant(rig.token_id, f"/pool/{rig.pool}", "VM.Config.CDROM")
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    (vm,) = rig.vms()
    assert vm.config["ide2"] == f"local-lvm:vm-{vm.vmid}-cloudinit,media=cdrom"
    assert re.fullmatch(r"virtio=BC:24:11:[0-9A-F:]{8},bridge=vmbr0", vm.config["net0"])
    again = sand.run("plan")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout
    doctor = sand.run("doctor")
    assert said[0] not in doctor.stdout, doctor.stdout
