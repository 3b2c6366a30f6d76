"""The disk of the rig's Proxmox template: the real-Lima tier's Debian 12 image (cloud-init,
NoCloud, ifupdown + dhclient) with ``qemu-guest-agent`` added, as an operator's PVE template
carries it (sand finds a VM's address through the agent), and cloud-init's package module
back in its final stage (``package_upgrade``, which PVE's user-data asks for). Built once
from that image, kernel and initrd shared with it, and cached next to it; each VM boots a
qcow2 overlay over it (``tests/rig/pveguests.py``), so the cache is never written.

The image is a copy of the Lima image's ``rootfs.raw`` (sparse) into which the package is
installed in a chroot of the loop-mounted file system: the Lima image itself stays untouched
for the tier that owns it.

CLI::

    python -m tests.rig.pveimage build   # build if missing, print the directory
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

from tests.rig import limaimage
from tests.rig._util import RigError, cache_dir, file_lock, log, remove_tree, run

PACKAGES = ("qemu-guest-agent",)
RECIPE_VERSION = 2
# The Lima image trims cloud-init's final stage to what Lima's seed uses; a PVE guest's
# cloud image runs the package module too, which acts on the ``package_upgrade: true``
# PVE writes into every user-data unless ``ciupgrade=0`` (Cloudinit.pm
# ``cloudinit_userdata``): ``apt-get update`` then ``dist-upgrade``, as on a real cluster
# (here with no mirror in reach: the update fails at once and the upgrade finds nothing).
CLOUD_CFG = """\
cloud_final_modules: [package-update-upgrade-install, write-files-deferred, scripts-per-once,
  scripts-per-boot, scripts-per-instance, scripts-user, final-message, power-state-change]
"""


def image_dir() -> Path:
    ident = {"lima": limaimage.image_dir().name, "packages": PACKAGES, "v": RECIPE_VERSION}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"pve-image-bookworm-{key}"


def built() -> Path | None:
    dest = image_dir()
    return dest if (dest / "stamp.json").is_file() else None


# Runs as root in a private mount namespace: nothing stays mounted if it dies midway.
_INSTALL = r"""set -eu
IMG="$1"; MNT="$2"; shift 2
mount -o loop "$IMG" "$MNT"
mount -t proc proc "$MNT/proc"
mount -t sysfs sysfs "$MNT/sys"
mount --rbind /dev "$MNT/dev"
cp /etc/resolv.conf "$MNT/etc/resolv.conf"
chroot "$MNT" /bin/sh -euc '
printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
apt-get update -q
apt-get install -y -q --no-install-recommends "$@"
apt-get clean; rm -rf /var/lib/apt/lists/*; rm -f /usr/sbin/policy-rc.d /etc/resolv.conf
' sh "$@"
printf '%s' "$PVE_RIG_CLOUD_CFG" > "$MNT/etc/cloud/cloud.cfg.d/91-pve-rig.cfg"
umount -R "$MNT/dev" "$MNT/sys" "$MNT/proc"
umount "$MNT"
"""


def build() -> Path:
    done = built()
    if done:
        return done
    lima = limaimage.build()
    dest = image_dir()
    with file_lock(cache_dir() / "pve-image.lock"):
        if built():
            return dest
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            run(["cp", "--sparse=always", lima / "rootfs.raw", tmp / "rootfs.raw"], timeout=900)
            (tmp / "mnt").mkdir()
            log(f"installing {' '.join(PACKAGES)} into a copy of the Lima image")
            run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", _INSTALL, "sh",
                 tmp / "rootfs.raw", tmp / "mnt", *PACKAGES],
                timeout=1800,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                     "DEBIAN_FRONTEND": "noninteractive", "PVE_RIG_CLOUD_CFG": CLOUD_CFG},
            )  # fmt: skip
            (tmp / "mnt").rmdir()
            for name in ("vmlinuz", "initrd.img"):
                shutil.copyfile(lima / name, tmp / name)
            for path in tmp.iterdir():
                path.chmod(0o644)
            (tmp / "stamp.json").write_text(json.dumps({"from": lima.name, "packages": PACKAGES}))
            tmp.chmod(0o755)
            remove_tree(dest)
            tmp.rename(dest)
            for old in dest.parent.glob("pve-image-bookworm-*"):
                if old != dest:  # an older recipe's copy: ~1.5 GB
                    shutil.rmtree(old, ignore_errors=True)
        finally:
            if tmp.exists():
                remove_tree(tmp)
        log(f"PVE template image built in {time.monotonic() - started:.0f}s: {dest}")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.pveimage")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    try:
        print(build())
    except RigError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
