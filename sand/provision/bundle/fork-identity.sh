#!/bin/bash
# Step "fork-identity" (root, a fork only): a fork boots from a copy of its source's
# disk, so it starts with the source's machine-id (DHCP leases, journals and every
# tool that tells machines apart by it would take the two for one), its SSH host
# keys and its hostname. Once per fork (a mark holds the fork's name: a fork of a
# fork is made anew again), this makes them the fork's own:
# - /etc/machine-id: a new random id, written in place; D-Bus's copy removed;
# - SSH host keys: removed and made anew (ssh-keygen -A), sshd reloaded (sand's
#   own connection is kept; a Proxmox guest's key is not pinned: it checks none);
# - the hostname: the fork's name, in /etc/hostname and the kernel's.
# argv: the VM's name (validated by the host). stdin: unused.
. "$(dirname -- "$0")/lib.sh"
name=${1:-}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9-]{0,62}$ ]] || die "not a VM name: $name"
mark=/var/lib/sand/fork-identity
[ "$(cat -- "$mark" 2>/dev/null || true)" != "$name" ] || exit 0

id=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
[[ $id =~ ^[0-9a-f]{32}$ ]] || die "could not make a machine-id"
printf '%s\n' "$id" >/etc/machine-id # in place: systemd may have it mounted
rm -f /var/lib/dbus/machine-id
changed "/etc/machine-id made anew"

rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
ssh-keygen -A >&2 || die "making SSH host keys failed"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl try-reload-or-restart ssh.service sshd.service >&2 2>&1 || true
fi
changed "SSH host keys made anew"

if [ "$(cat /etc/hostname 2>/dev/null || true)" != "$name" ]; then
	printf '%s\n' "$name" >/etc/hostname
	changed "hostname $name"
fi
[ "$(hostname)" = "$name" ] || hostname "$name"

mkdir -p /var/lib/sand
printf '%s\n' "$name" >"$mark"
