"""The NoCloud drive PVE generates for a VM at its start, from the VM's stored config.

Follows qemu-server's ``PVE::QemuServer::Cloudinit`` (``generate_nocloud``): ``user-data``
(``cloudinit_userdata``: hostname, fqdn, ``ciuser``, the URL-encoded ``sshkeys`` one per
line, ``package_upgrade`` unless ``ciupgrade=0``), ``network-config`` version 1
(``nocloud_network``: one physical NIC per ``netN`` with an ``ipconfigN``, matched by MAC,
``dhcp4`` or static; the nameservers of ``nameserver``/``searchdomain`` or the host's
``resolv.conf``), ``meta-data`` whose instance-id is the SHA-1 of user-data + network-config
(``nocloud_gen_metadata``: it changes with the config, so cloud-init in the guest sees a new
instance whenever any of it changes), an empty ``vendor-data``; an ISO 9660 volume labelled
``cidata`` made with PVE's own ``genisoimage`` arguments (``commit_cloudinit_disk``).
Custom snippets (``cicustom``) are not modelled: sand never sets them.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NET_MODELS = ("virtio", "e1000", "e1000e", "rtl8139", "vmxnet3")


def _props(value: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in str(value or "").split(","):
        key, sep, val = part.partition("=")
        if sep:
            out[key.strip()] = val.strip()
    return out


def net_mac(net: object) -> str:
    """The MAC of a ``netN`` value (``virtio=BC:24:..,bridge=vmbr0``), lower-cased."""
    props = _props(net)
    mac = props.get("macaddr") or next((props[m] for m in NET_MODELS if m in props), "")
    if not mac:
        raise ValueError(f"network interface has no mac address: {net}")
    return mac.lower()


def cloudinit_drive(config: Mapping[str, Any]) -> str | None:
    """The key of the config's cloud-init drive (``PVE::QemuConfig::has_cloudinit``:
    ``Drive::drive_is_cloudinit``), None when it has none."""
    for key in sorted(config):
        if re.fullmatch(r"(ide|sata|scsi|virtio)\d+", key):
            volume = str(config[key] or "").split(",")[0]
            if re.search(r"[:/](?:vm-\d+-)?cloudinit(?:\.\w+)?$", volume):
                return key
    return None


def hostname_fqdn(config: Mapping[str, Any], vmid: int) -> tuple[str, str]:
    """``get_hostname_fqdn``."""
    hostname = str(config.get("name") or f"VM{vmid}")
    if "." in hostname:
        return hostname.split(".", 1)[0], hostname
    search = config.get("searchdomain")
    return hostname, f"{hostname}.{search}" if search else hostname


def dns_conf(config: Mapping[str, Any], resolv: str) -> tuple[list[str], list[str]]:
    """``get_dns_conf``: the VM's search domains and nameservers, else the host's."""
    host_search: list[str] = []
    host_ns: list[str] = []
    for line in resolv.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "search":
            host_search = words[1:]
        elif len(words) >= 2 and words[0] == "nameserver" and len(host_ns) < 3:
            host_ns.append(words[1])
    search = str(config["searchdomain"]).split() if config.get("searchdomain") else host_search
    ns = str(config["nameserver"]).split() if config.get("nameserver") else host_ns
    return search, ns


def user_data(config: Mapping[str, Any], vmid: int) -> str:
    """``cloudinit_userdata``."""
    hostname, fqdn = hostname_fqdn(config, vmid)
    out = f"#cloud-config\nhostname: {hostname}\nmanage_etc_hosts: true\nfqdn: {fqdn}\n"
    user = config.get("ciuser")
    if user is not None:
        out += f"user: {user}\n"
        if user == "root":
            out += "disable_root: False\n"
    if config.get("cipassword") is not None:
        out += f"password: {config['cipassword']}\n"
    if config.get("sshkeys") is not None:
        keys = urllib.parse.unquote(str(config["sshkeys"])).split("\n")
        out += "ssh_authorized_keys:\n"
        out += "".join(f"  - {k.rstrip()}\n" for k in keys if k.strip())
    out += "chpasswd:\n  expire: False\n"
    if user is None or user != "root":
        out += "users:\n  - default\n"
    if str(config.get("ciupgrade", "1")) not in ("0", "false"):
        out += "package_upgrade: true\n"
    return out


def _mask(prefix: int) -> str:
    bits = (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF
    return ".".join(str((bits >> s) & 0xFF) for s in (24, 16, 8, 0))


def network_config(config: Mapping[str, Any], resolv: str) -> str:
    """``nocloud_network`` (version 1)."""
    out = "version: 1\nconfig:\n"
    ifaces = sorted(k for k in config if k.startswith("net") and k[3:].isdigit())
    for iface in ifaces:
        n = iface[3:]
        if not config.get(f"ipconfig{n}"):
            continue
        ipc = _props(config[f"ipconfig{n}"])
        out += f"    - type: physical\n      name: eth{n}\n"
        out += f"      mac_address: '{net_mac(config[iface])}'\n      subnets:\n"
        ip, ip6 = ipc.get("ip"), ipc.get("ip6")
        if ip == "dhcp":
            out += "        - type: dhcp4\n"
        elif ip:
            addr, _, prefix = ip.partition("/")
            out += f"        - type: static\n          address: '{addr}'\n"
            out += f"          netmask: '{_mask(int(prefix))}'\n"
            if ipc.get("gw"):
                out += f"          gateway: '{ipc['gw']}'\n"
        if ip6 == "dhcp":
            out += "        - type: dhcp6\n"
        elif ip6 == "auto":
            out += "        - type: ipv6_slaac\n"
        elif ip6:
            out += f"        - type: static6\n          address: '{ip6}'\n"
            if ipc.get("gw6"):
                out += f"          gateway: '{ipc['gw6']}'\n"
    search, nameservers = dns_conf(config, resolv)
    # PVE tests the two array references, always defined: the entry is always written.
    out += "    - type: nameserver\n"
    if nameservers:
        out += "      address:\n" + "".join(f"      - '{a}'\n" for a in nameservers)
    if search:
        out += "      search:\n" + "".join(f"      - '{s}'\n" for s in search)
    return out


def instance_id(user: str, network: str) -> str:
    """``nocloud_gen_metadata``: SHA-1 of user-data followed by network-config."""
    return hashlib.sha1((user + network).encode()).hexdigest()


def seed_files(config: Mapping[str, Any], vmid: int, resolv: str | None = None) -> dict[str, str]:
    """The four files of the drive, by name."""
    if resolv is None:
        try:
            resolv = Path("/etc/resolv.conf").read_text()
        except OSError:
            resolv = ""
    user, network = user_data(config, vmid), network_config(config, resolv)
    return {
        "user-data": user,
        "network-config": network,
        "meta-data": f"instance-id: {instance_id(user, network)}\n",
        "vendor-data": "",
    }


def write_iso(files: Mapping[str, str], dest: Path) -> None:
    """The ISO PVE writes: ``genisoimage -quiet -iso-level 3 -J -R -V cidata``."""
    with tempfile.TemporaryDirectory(prefix="cidata-") as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        genisoimage = shutil.which("genisoimage") or "genisoimage"
        subprocess.run(
            [genisoimage, "-quiet", "-iso-level", "3", "-J", "-R", "-V", "cidata",
             "-o", str(dest), tmp],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
