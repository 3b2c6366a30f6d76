"""The rig's guests get a cloud-init drive only where the VM's config has one, at that
drive's key (qemu-server ``vm_start`` → ``apply_cloudinit_config``, which does nothing for
a VM without a cloud-init drive; ``Drive::drive_is_cloudinit``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakepve_rig import cloudinit
from tests.rig._util import RigError
from tests.rig.pveguests import cloudinit_cdrom

NET = "virtio=BC:24:11:00:01:2C,bridge=vmbr0"


@pytest.mark.parametrize(
    ("drives", "found"),
    [
        ({}, None),  # no drive: no seed, nothing attached
        ({"ide2": "none,media=cdrom"}, None),
        ({"ide2": "local:iso/debian.iso,media=cdrom"}, None),
        ({"ide2": "local-lvm:vm-100-cloudinit,media=cdrom"}, "ide2"),
        ({"ide0": "local:100/vm-100-cloudinit.qcow2,media=cdrom"}, "ide0"),
        ({"scsi1": "rbd:vm-100-cloudinit,media=cdrom"}, "scsi1"),
    ],
)
def test_the_cloudinit_drive_is_the_configs(drives: dict[str, str], found: str | None) -> None:
    config = {"net0": NET, "scsi0": "local-lvm:vm-100-disk-0,size=4G", **drives}
    assert cloudinit.cloudinit_drive(config) == found


def test_it_is_attached_at_its_key_or_not_at_all(tmp_path: Path) -> None:
    iso = tmp_path / "cloudinit.iso"
    assert cloudinit_cdrom(None, iso) == []
    assert cloudinit_cdrom("ide0", iso) == [
        "-drive", f"file={iso},if=none,id=ide0,media=cdrom,readonly=on",
        "-device", "ide-cd,drive=ide0,bus=ide.0",
    ]  # fmt: skip
    with pytest.raises(RigError, match="IDE cloud-init drives only"):
        cloudinit_cdrom("scsi1", iso)


def test_the_agents_waits_grow_with_the_boots_measured(tmp_path: Path) -> None:
    from tests.rig.pveguests import REFERENCE_BOOT, Machine, QemuHypervisor

    hv = QemuHypervisor(tmp_path)  # not entered: no bridge, no QEMU
    assert (hv.slowness(), hv.wait("sync")) == (1.0, 5.0)
    booted = Machine(100, tmp_path, "tap", "bc:24:11:00:00:01", {}, None, launched=10.0)  # type: ignore[arg-type]
    booted.addressed = 10.0 + 3 * REFERENCE_BOOT  # a host three times as busy
    hv.past.append(booted)
    assert hv.boots() == [3 * REFERENCE_BOOT]
    assert (hv.wait("connect"), hv.wait("sync"), hv.wait("reply")) == (9.0, 15.0, 90.0)
