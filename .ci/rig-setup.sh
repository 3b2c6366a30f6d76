#!/usr/bin/env bash
# Prepare a Debian 12 machine (as root) to run the real-guest rig tests:
# host tools from apt, then the cached debootstrap rootfs and the qemu image.
# Idempotent: installs only missing packages and reuses the caches
# ($SAND_RIG_CACHE, default /var/cache/sand-rig), so a warm run takes seconds.
#
# Cold-cache timings on the 2-core CI machine: rootfs ~1 min, qemu image
# ~1.5 min (most of it apt downloading and unpacking the kernel), Lima ~3 min
# (go build of limactl and lima-guestagent; cached per version afterwards), the
# Lima image ~2 min (cloud-init and a kernel over the workbench tree), the Proxmox
# template image ~10 s (a copy of the Lima image with qemu-guest-agent).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ "$(id -u)" != 0 ]; then
  echo "rig-setup: must run as root (debootstrap, netns, mounts)" >&2
  exit 1
fi

# What the rig runs on the host.  Guests bring their own sshd, sudo, git,
# direnv, ... inside the rootfs, so openssh-server is not needed here.
PACKAGES=(
  debootstrap     # builds the guest rootfs
  iproute2        # ip netns / veth / bridge
  util-linux      # unshare, nsenter, mount
  openssh-client  # ssh-keygen for per-guest keys, ssh for QemuGuest.run_root
  git             # the git http-backend server and repo seeding
  e2fsprogs       # mkfs.ext4 -d for the qemu disk and seed images
  qemu-system-x86 # the full VM (TCG)
  qemu-utils      # qemu-img for per-guest qcow2 overlays
  ca-certificates
  gcc libc6-dev   # cgo: Lima's Makefile builds limactl with CGO_ENABLED=1
  genisoimage     # the NoCloud drive of a Proxmox guest, made as PVE makes it
  dnsmasq-base    # DHCP for the Proxmox guests' bridge
  nftables        # a Proxmox VM's firewall applied on the host, as pve-firewall does
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "rig-setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "rig-setup: host packages already installed"
fi

t0=$SECONDS
"$PYTHON" -m tests.rig.rootfs build
t1=$SECONDS
# The rootfs with sand's workbench installed, and the apt mirror of it.
"$PYTHON" -m tests.rig.workbench build
t2=$SECONDS
"$PYTHON" -m tests.rig.qemu build
t3=$SECONDS
# The real Lima (limactl + guest agent of the pinned release, from its Go module;
# needs Go and the Go module proxy), and the unprivileged user it runs as.
"$PYTHON" -m tests.rig.limabuild build
# A Debian 12 image with cloud-init that Lima boots (direct kernel, TCG).
"$PYTHON" -m tests.rig.limaimage build
# The Proxmox template's disk: that image plus qemu-guest-agent (a copy, ~10 s).
"$PYTHON" -m tests.rig.pveimage build
"$PYTHON" -m tests.rig.lima env >/dev/null
# sand's dependencies where the Lima user's /usr/bin/python3 can read them (the
# real_lima tier runs sand as that user; root's site-packages may be unreadable).
"$PYTHON" -m tests.rig.limapy >/dev/null
t4=$SECONDS
echo "rig-setup: rootfs ready in $((t1 - t0))s, workbench in $((t2 - t1))s," \
  "qemu image in $((t3 - t2))s, Lima in $((t4 - t3))s"
