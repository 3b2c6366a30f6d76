#!/bin/bash
# Step "pool-identity" (root, a warm pool's spare and the VM that claims it): the
# machine's own machine-id and SSH host keys, and its name as hostname. A spare is a
# clone of a golden base that was generalized (its machine-id emptied, its host keys
# recorded in $base): its first boot made it a machine-id and, where cloud-init runs,
# host keys of its own. What is its own is kept, so a claim writes only its hostname
# (making host keys anew, RSA above all, cost a claim most of its time); what is not
# (a machine-id that is missing, a host key that is the base's, or anything on a
# machine whose base left no record, e.g. one generalized by an older sand) is made
# anew, as fork-identity does, and recorded in $own. The spare runs this step when it
# is provisioned, so any key that has to be made is made then, not in the claim.
# - /etc/machine-id: kept if it is a machine-id and either in $own or made after a
#   recorded base; else a new random id, written in place; D-Bus's copy removed;
# - SSH host keys: kept if each is in $own or, after a recorded base, none of the
#   base's; else removed and made anew (ssh-keygen -A), sshd reloaded (sand's own
#   connection is kept; the provisioner pins the new key where it pins keys);
# - the hostname: the VM's name, in /etc/hostname and the kernel's.
# A copied disk carries $own, but only with the very id and keys it vouches for: a
# fork of this machine makes all of them anew (fork-identity) and so no longer matches.
# argv: the VM's name (validated by the host). stdin: unused.
. "$(dirname -- "$0")/lib.sh"
name=${1:-}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9-]{0,62}$ ]] || die "not a VM name: $name"
base=/var/lib/sand/base-host-keys # generalize.sh: the host keys the base kept
own=/var/lib/sand/own-identity    # this step: the machine-id and keys it found or made

host_keys() { # the public host keys' key fields, one a line
	local pub
	for pub in /etc/ssh/ssh_host_*_key.pub; do
		[ -f "$pub" ] && awk 'NF >= 2 { print $2 }' "$pub"
	done
	return 0
}
vouched() { # vouched WORD: WORD is a line of $own
	[ -f "$own" ] && grep -qxF -- "$1" "$own"
}

id=$(cat /etc/machine-id 2>/dev/null || true)
if ! [[ $id =~ ^[0-9a-f]{32}$ ]] || ! { vouched "$id" || [ -f "$base" ]; }; then
	id=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	[[ $id =~ ^[0-9a-f]{32}$ ]] || die "could not make a machine-id"
	printf '%s\n' "$id" >/etc/machine-id # in place: systemd may have it mounted
	rm -f /var/lib/dbus/machine-id
	changed "/etc/machine-id made anew"
fi

keys=$(host_keys)
mine=$([ -n "$keys" ] && echo yes || echo no)
while IFS= read -r key; do
	[ -n "$key" ] || continue
	vouched "$key" && continue
	[ -f "$base" ] && ! grep -qxF -- "$key" "$base" && continue
	mine=no
done <<<"$keys"
if [ "$mine" != yes ]; then
	rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
	ssh-keygen -A >&2 || die "making SSH host keys failed"
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl try-reload-or-restart ssh.service sshd.service >&2 2>&1 || true
	fi
	changed "SSH host keys made anew"
	keys=$(host_keys)
fi

mkdir -p /var/lib/sand
record=$(printf '%s\n%s\n' "$id" "$keys")
if [ "$(cat -- "$own" 2>/dev/null || true)" != "$record" ]; then
	printf '%s\n' "$record" >"$own.new" && mv -f -- "$own.new" "$own"
fi

if [ "$(cat /etc/hostname 2>/dev/null || true)" != "$name" ]; then
	printf '%s\n' "$name" >/etc/hostname
	changed "hostname $name"
fi
[ "$(hostname)" = "$name" ] || hostname "$name"
