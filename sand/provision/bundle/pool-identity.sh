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
. "${0%/*}/lib.sh"
name=${1:-}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9-]{0,62}$ ]] || die "not a VM name: $name"
base=/var/lib/sand/base-host-keys # generalize.sh: the host keys the base kept
own=/var/lib/sand/own-identity    # this step: the machine-id and keys it found or made
# What a claim finds is read by bash itself, no other program started: a claim's own
# steps are what a warm pool is measured by, and a process start is not cheap in a guest
# under emulation.

# text_of VAR FILE: FILE's text without its trailing newlines ("" when unreadable).
text_of() {
	local -n into=$1
	into=""
	[ -r "$2" ] || return 0
	IFS= read -r -d '' into <"$2" || true
	while [[ $into == *$'\n' ]]; do into=${into%$'\n'}; done
}
host_keys() { # the public host keys' key fields, one a line, into $keys
	local pub line type key rest
	keys=""
	for pub in /etc/ssh/ssh_host_*_key.pub; do
		[ -f "$pub" ] || continue
		while read -r type key rest || [ -n "$type" ]; do
			[ -z "$key" ] || keys+=$key$'\n'
			type="" key=""
		done <"$pub"
	done
	keys=${keys%$'\n'}
}
own_lines=() base_lines=()
[ ! -f "$own" ] || mapfile -t own_lines <"$own"
[ ! -f "$base" ] || mapfile -t base_lines <"$base"
listed() { # listed WORD LINE...: WORD is one of the LINEs
	local word=$1 line
	shift
	for line do [ "$line" != "$word" ] || return 0; done
	return 1
}
vouched() { listed "$1" ${own_lines[@]+"${own_lines[@]}"}; } # WORD is a line of $own

text_of id /etc/machine-id
if ! [[ $id =~ ^[0-9a-f]{32}$ ]] || ! { vouched "$id" || [ -f "$base" ]; }; then
	id=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	[[ $id =~ ^[0-9a-f]{32}$ ]] || die "could not make a machine-id"
	printf '%s\n' "$id" >/etc/machine-id # in place: systemd may have it mounted
	rm -f /var/lib/dbus/machine-id
	changed "/etc/machine-id made anew"
fi

host_keys
mine=no
[ -z "$keys" ] || mine=yes
while IFS= read -r key; do
	[ -n "$key" ] || continue
	vouched "$key" && continue
	[ -f "$base" ] && ! listed "$key" ${base_lines[@]+"${base_lines[@]}"} && continue
	mine=no
done <<<"$keys"
if [ "$mine" != yes ]; then
	rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
	ssh-keygen -A >&2 || die "making SSH host keys failed"
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl try-reload-or-restart ssh.service sshd.service >&2 2>&1 || true
	fi
	changed "SSH host keys made anew"
	host_keys
fi

[ -d /var/lib/sand ] || mkdir -p /var/lib/sand
record=$id$'\n'$keys
text_of recorded "$own"
if [ "$recorded" != "$record" ]; then
	printf '%s\n' "$record" >"$own.new" && mv -f -- "$own.new" "$own"
fi

text_of current /etc/hostname
if [ "$current" != "$name" ]; then
	printf '%s\n' "$name" >/etc/hostname
	changed "hostname $name"
fi
text_of current /proc/sys/kernel/hostname
if [ "$current" != "$name" ]; then
	# The kernel's, written as hostname(1) would set it.
	{ printf '%s' "$name" >/proc/sys/kernel/hostname; } 2>/dev/null || hostname "$name"
fi
