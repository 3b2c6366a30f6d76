"""The NoCloud drive the rig boots Proxmox guests with is the one PVE generates
(qemu-server ``PVE::QemuServer::Cloudinit::generate_nocloud``), read off the files and the
ISO it writes."""

from __future__ import annotations

import hashlib
import shutil
import urllib.parse
from pathlib import Path

from tests.fakepve_rig import cloudinit
from tests.required import missing

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJnJ9RXdpq8F/1/0xeznum1L/dJcUrs9IKIJ1ghVo9UE sand"
# What sand's create writes (sand/backends/proxmox/create.py).
CONFIG = {
    "name": "agent-1",
    "memory": 2048,
    "net0": "virtio=BC:24:11:00:01:2C,bridge=vmbr0",
    "ciuser": "claude",
    "sshkeys": urllib.parse.quote(KEY + "\n", safe=""),
    "ipconfig0": "ip=dhcp",
}
RESOLV = "search example.net\nnameserver 10.0.0.53\n"


def test_user_data_is_pves() -> None:
    assert cloudinit.user_data(CONFIG, 300) == (
        "#cloud-config\n"
        "hostname: agent-1\n"
        "manage_etc_hosts: true\n"
        "fqdn: agent-1\n"
        "user: claude\n"
        "ssh_authorized_keys:\n"
        f"  - {KEY}\n"
        "chpasswd:\n"
        "  expire: False\n"
        "users:\n"
        "  - default\n"
        "package_upgrade: true\n"
    )
    root = cloudinit.user_data({**CONFIG, "ciuser": "root", "ciupgrade": 0}, 300)
    assert "disable_root: False\n" in root and "users:" not in root
    assert "package_upgrade" not in root


def test_network_config_is_version_1_matched_by_mac() -> None:
    assert cloudinit.network_config(CONFIG, RESOLV) == (
        "version: 1\n"
        "config:\n"
        "    - type: physical\n"
        "      name: eth0\n"
        "      mac_address: 'bc:24:11:00:01:2c'\n"
        "      subnets:\n"
        "        - type: dhcp4\n"
        "    - type: nameserver\n"
        "      address:\n"
        "      - '10.0.0.53'\n"
        "      search:\n"
        "      - 'example.net'\n"
    )
    static = {**CONFIG, "ipconfig0": "ip=192.0.2.7/24,gw=192.0.2.1", "nameserver": "9.9.9.9"}
    text = cloudinit.network_config(static, RESOLV)
    assert "- type: static\n          address: '192.0.2.7'\n" in text
    assert "netmask: '255.255.255.0'\n          gateway: '192.0.2.1'\n" in text
    assert "- '9.9.9.9'" in text and "10.0.0.53" not in text


def test_instance_id_follows_the_config_cloud_init_sees() -> None:
    files = cloudinit.seed_files(CONFIG, 300, RESOLV)
    digest = hashlib.sha1((files["user-data"] + files["network-config"]).encode()).hexdigest()
    assert files["meta-data"] == f"instance-id: {digest}\n"
    assert files["vendor-data"] == ""
    other_key = {**CONFIG, "sshkeys": urllib.parse.quote(KEY.replace("sand", "x") + "\n")}
    other_name = {**CONFIG, "name": "agent-2"}
    for changed in (other_key, other_name):
        assert cloudinit.seed_files(changed, 300, RESOLV)["meta-data"] != files["meta-data"]
    # What the guest does not see leaves the instance as it was.
    same = cloudinit.seed_files({**CONFIG, "memory": 4096}, 300, RESOLV)
    assert same["meta-data"] == files["meta-data"]


def test_the_drive_is_an_iso_labelled_cidata(tmp_path: Path) -> None:
    if shutil.which("genisoimage") is None:
        missing("the NoCloud drive needs genisoimage (run .ci/rig-setup.sh)")
    iso = tmp_path / "seed.iso"
    files = cloudinit.seed_files(CONFIG, 300, RESOLV)
    cloudinit.write_iso(files, iso)
    data = iso.read_bytes()
    # ISO 9660 primary volume descriptor (sector 16): its volume identifier at byte 40.
    assert data[32768 + 1 : 32768 + 6] == b"CD001"
    assert data[32768 + 40 : 32768 + 72].rstrip() == b"cidata"
    for text in files.values():
        if text:
            assert text.encode() in data
