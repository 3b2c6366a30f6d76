#!/bin/bash
# Step "generalize" (root): the last step of a golden base's build, before it is
# stopped and frozen. Every VM made from the base must be a machine of its own,
# and must run its own steps:
# - the ledger records of the VM-scoped steps the build ran (its user) are removed,
#   so each clone runs them itself; the machine steps' records stay, so a clone
#   skips what the base already holds;
# - /etc/machine-id is emptied (systemd makes a new one at the clone's first boot:
#   distinct DHCP leases, journals), and D-Bus's copy removed;
# - where cloud-init runs the guest, its state is cleaned and the SSH host keys
#   removed: each clone's first boot is a new instance and gets keys of its own;
# - the host keys the base keeps are recorded (/var/lib/sand/base-host-keys), so a
#   pool's spare can tell keys of its own from the base's;
# - the DHCP clients' saved leases are removed: a clone asking for the base's old
#   address first would, on a network that grants it, take the address of the base's
#   build machine (or of another clone that asked first);
# - apt's downloaded packages and lists are dropped (a clone fetches fresh lists
#   when it installs anything of its own).
# - every agent login in a home (an image step, or a person, logged in on the build
#   machine) is removed: a base holds no login, as it holds no delivered secret (sand
#   delivers none to a build machine).
# argv: the VM-scoped step names (validated by the host). stdin: unused.
. "$(dirname -- "$0")/lib.sh"
ledger=/var/lib/sand/ledger
for step in "$@"; do
	[[ $step =~ ^[a-z][a-z0-9-]{0,40}$ ]] || die "not a step name: $step"
	if [ -e "$ledger/$step" ]; then
		rm -f -- "$ledger/$step"
		changed "ledger $step cleared"
	fi
done
if [ -s /etc/machine-id ]; then
	: >/etc/machine-id
	changed "/etc/machine-id emptied"
fi
rm -f /var/lib/dbus/machine-id
if command -v cloud-init >/dev/null 2>&1; then
	cloud-init clean --logs >&2 || die "cloud-init clean failed"
	rm -f /etc/ssh/ssh_host_*
	changed "cloud-init state and SSH host keys removed"
fi
# The host keys the base keeps (none where cloud-init gives each clone its own at its
# first boot): a pool's spare tells its own keys from the base's by them, and keeps
# its own (pool-identity.sh); no machine of the base's vouches for its identity.
mkdir -p /var/lib/sand
for pub in /etc/ssh/ssh_host_*_key.pub; do
	[ ! -f "$pub" ] || awk 'NF >= 2 { print $2 }' "$pub"
done >/var/lib/sand/base-host-keys
rm -f /var/lib/sand/own-identity
leases=(/var/lib/dhcp/*.leases /var/lib/dhclient/*.lease* /var/lib/dhcpcd/*.lease*
	/var/lib/NetworkManager/*.lease)
for lease in "${leases[@]}"; do
	if [ -e "$lease" ]; then
		rm -f -- "$lease"
		changed "DHCP lease ${lease##*/} removed"
	fi
done
for home in /root /home/*; do
	[ -d "$home" ] && [ ! -L "$home" ] || continue
	forget_logins "$home"
done
apt-get clean >&2 || true
rm -rf /var/lib/apt/lists/*
sync
