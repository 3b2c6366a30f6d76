"""Build (once) a Debian 12 disk image the real Lima can boot: the rig's workbench
tree plus a kernel and cloud-init (NoCloud reads Lima's cidata), booted by direct
kernel (``images[].kernel``/``initrd``) with SeaBIOS (``firmware.legacyBIOS``).

What a Lima guest needs beyond the rig's other guests, each found by booting:

* cloud-init, dbus and libpam-systemd: Lima's boot scripts start systemd-logind
  and wait for the user's session;
* sshd with Debian's own config (``UsePAM yes``): the rig's ``UsePAM no`` refuses
  key logins to the account cloud-init creates, which it locks;
* an ``/etc/hosts``: Lima's ``06-etc-hosts.sh`` edits it;
* iptables (Lima's ``30-install-packages.sh`` apt-gets it at first boot whenever the
  host resolver is on, i.e. always here) and rsync (``limactl copy`` prefers it), baked
  in so no boot reaches deb.debian.org.

What keeps a boot alive under TCG on a loaded two-core host (see KERNEL_CMDLINE): the
kernel's RCU stall detector, watchdogs and Spectre/Meltdown mitigations are off. The
tier also gives the guest one vCPU (tests/e2e/test_real_lima.py).

CLI::

    python -m tests.rig.limaimage build   # build if missing, print the directory
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.rig._util import RigError, cache_dir, chroot_sh, file_lock, log, remove_tree, run
from tests.rig._util import write_file as write
from tests.rig.workbench import ensure_workbench, workbench_dir

PACKAGES = (
    "linux-image-amd64",
    "systemd-sysv",
    "cloud-init",
    "dbus",
    "libpam-systemd",
    "isc-dhcp-client",
    "ifupdown",
    "udev",
    "iptables",
    "rsync",
)
RECIPE_VERSION = 3
SIZE = "6G"
# Under TCG a vCPU thread starved by the host's other load looks, to the guest, like a
# CPU stuck for tens of seconds: Debian's kernel (6.1, CONFIG_RCU_CPU_STALL_TIMEOUT=21)
# then reports an RCU stall, printing backtraces to the emulated serial console with
# interrupts off, which starves it further; a first boot seen that way never finished.
# So: no RCU stall reports, no soft/hard lockup watchdog, and no mitigations (KPTI alone
# flushes TCG's software TLB at every syscall). The clocksource watchdog stays: the TSC
# is calibrated while the host is busy, and with `tsc=reliable` a guest was seen running
# its clock 4x too fast (journald's start "timed out" after 25 s of real time).
# A test image's choices, not a guest's to copy.
KERNEL_CMDLINE = " ".join(
    (
        "root=/dev/vda rw console=ttyS0",
        "rcupdate.rcu_cpu_stall_suppress=1 rcupdate.rcu_cpu_stall_suppress_at_boot=1",
        "rcupdate.rcu_cpu_stall_timeout=300",
        "nowatchdog nmi_watchdog=0 mitigations=off",
    )
)
# cloud-init as Lima uses it (pkg/cidata/cidata.TEMPLATE.d/user-data: users, write_files,
# bootcmd, growpart, timezone, ca_certs, ssh keys, and its boot.sh as a per-boot script)
# and nothing else: each module costs seconds under TCG (an RSA host key ~20 s, locale
# generation, grub and apt configuration). Only an ed25519 host key, the one sand pins.
CLOUD_CFG = """\
datasource_list: [NoCloud, None]
ssh_genkeytypes: [ed25519]
cloud_init_modules: [migrator, seed_random, bootcmd, write-files, growpart, resizefs, set_hostname,
  update_hostname, update_etc_hosts, ca-certs, users-groups, ssh]
cloud_config_modules: [timezone, runcmd]
cloud_final_modules: [write-files-deferred, scripts-per-once, scripts-per-boot,
  scripts-per-instance, scripts-user, final-message, power-state-change]
"""
# Modules udev would load for devices a Lima guest under TCG never uses (each load
# verifies a signature in emulated code: ~20 s for kvm alone).
NOT_LOADED = ("kvm", "kvm_amd", "kvm_intel", "iTCO_wdt", "iTCO_vendor_support", "pcspkr",
              "powernow_k8")  # fmt: skip
# The initrd only needs the root disk (virtio) and its filesystem: Debian's default
# (MODULES=most) packs 35 MB of modules and loads dozens at every boot.
INITRD_MODULES = ("virtio_pci", "virtio_blk", "ext4", "crc32c_generic")
# Units that only cost boot time under TCG.
MASKED = (
    "systemd-networkd-wait-online.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "getty@tty1.service",
)


def image_dir() -> Path:
    ident = {"workbench": workbench_dir().name, "packages": PACKAGES, "v": RECIPE_VERSION}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"lima-image-bookworm-{key}"


def built() -> Path | None:
    dest = image_dir()
    return dest if (dest / "stamp.json").is_file() else None


def lima_images(dest: Path) -> list[dict[str, object]]:
    """The ``images:`` of a lima.yaml that boots this image."""
    return [
        {
            "location": str(dest / "rootfs.raw"),
            "arch": "x86_64",
            "kernel": {"location": str(dest / "vmlinuz"), "cmdline": KERNEL_CMDLINE},
            "initrd": {"location": str(dest / "initrd.img")},
        }
    ]


def _configure(tree: Path) -> None:
    write(tree / "etc/fstab", "/dev/vda / ext4 rw,errors=remount-ro 0 0\n")
    write(tree / "etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
    write(tree / "etc/cloud/cloud.cfg.d/90-sand-rig.cfg", CLOUD_CFG)
    write(tree / "etc/modprobe.d/sand-rig.conf", "".join(f"blacklist {m}\n" for m in NOT_LOADED))
    write(tree / "etc/initramfs-tools/conf.d/sand-rig.conf", "MODULES=list\n")
    write(tree / "etc/initramfs-tools/modules", "".join(f"{m}\n" for m in INITRD_MODULES))
    (tree / "etc/ssh/sshd_config.d/00-sand-rig.conf").unlink(missing_ok=True)
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # cloud-init makes them at every boot, as on a real Lima guest
    for unit in MASKED:
        link = tree / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")


def build() -> Path:
    done = built()
    if done:
        return done
    dest = image_dir()
    with file_lock(cache_dir() / "lima-image.lock"):
        if built():
            return dest
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            tree = tmp / "tree"
            run(["cp", "-a", "--reflink=auto", ensure_workbench().tree, tree], timeout=900)
            resolv = tree / "etc/resolv.conf"
            resolv.unlink(missing_ok=True)
            shutil.copyfile("/etc/resolv.conf", resolv)  # apt in the chroot
            log(f"installing {' '.join(PACKAGES)} into the Lima image tree")
            chroot_sh(
                tree,
                "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d;"
                " chmod 755 /usr/sbin/policy-rc.d; apt-get update -q;"
                " apt-get install -y -q --no-install-recommends " + " ".join(PACKAGES) + ";"
                " apt-get clean; rm -f /usr/sbin/policy-rc.d",
                timeout=1800,
            )
            resolv.unlink()
            _configure(tree)
            chroot_sh(tree, "update-initramfs -u -k all", timeout=900)
            kernel = sorted((tree / "boot").glob("vmlinuz-*"))
            initrd = sorted((tree / "boot").glob("initrd.img-*"))
            if not kernel or not initrd:
                raise RigError("the kernel install left no /boot/vmlinuz-* or initrd")
            shutil.copyfile(kernel[-1], tmp / "vmlinuz")
            shutil.copyfile(initrd[-1], tmp / "initrd.img")
            run(["mkfs.ext4", "-q", "-F", "-L", "limaroot", "-d", tree, tmp / "rootfs.raw", SIZE],
                timeout=900)  # fmt: skip
            shutil.rmtree(tree)
            for path in tmp.iterdir():
                path.chmod(0o644)  # Lima runs as the rig's user and copies them
            stamp = {"packages": PACKAGES, "kernel": kernel[-1].name}
            (tmp / "stamp.json").write_text(json.dumps(stamp) + "\n")
            tmp.chmod(0o755)
            remove_tree(dest)
            tmp.rename(dest)
        finally:
            if tmp.exists():
                remove_tree(tmp)
        log(f"Lima image built in {time.monotonic() - started:.0f}s: {dest}")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.limaimage")
    parser.add_argument("command", choices=["build", "path"])
    args = parser.parse_args(argv)
    try:
        found = build() if args.command == "build" else built()
    except RigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if found is None:
        print("the Lima image is not built: python -m tests.rig.limaimage build", file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
