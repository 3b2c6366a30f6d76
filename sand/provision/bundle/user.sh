#!/bin/bash
# Step "user" (root): the login user sand provisions for, with passwordless sudo.
# argv: USER (validated by the host). stdin: unused.
. "$(dirname -- "$0")/lib.sh"
user=$1

if ! command -v sudo >/dev/null 2>&1; then
	# Every later step runs as the user through sudo, and the VM promises it.
	DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 install -y sudo >&2
	changed "package sudo"
fi

if ! id -u "$user" >/dev/null 2>&1; then
	useradd --create-home --user-group --shell /bin/bash "$user"
	changed "user $user"
fi

# cloud-init or Lima usually granted this already; a drop-in of our own makes
# it true whatever the image did. visudo checks it before it can lock sudo out.
rule="$user ALL=(ALL:ALL) NOPASSWD:ALL"
dropin=/etc/sudoers.d/90-sand-$user
if ! { [ -f "$dropin" ] && [ "$(cat -- "$dropin")" = "$rule" ] && [ "$(mode_of "$dropin")" = 440 ]; }; then
	tmp=$(mktemp /etc/sudoers.d/.sand.XXXXXXXX)
	_sand_tmp+=("$tmp")
	printf '%s\n' "$rule" >"$tmp"
	chmod 440 "$tmp"
	visudo -c -q -f "$tmp" >&2 || die "the sudoers rule for $user did not validate"
	mv -f -- "$tmp" "$dropin"
	changed "sudoers $dropin"
fi

home=$(home_of "$user")
if [ ! -d "$home" ]; then
	install -d -m 755 -o "$user" -g "$(id -gn "$user")" -- "$home"
	changed "home $home"
fi

# Secrets live on the user's tmpfs (/run/user/UID). Under systemd, logind
# empties it when the user's last session ends; lingering keeps the user
# manager, and so the runtime dir, alive between sand's SSH sessions.
if [ -d /run/systemd/system ]; then
	if [ ! -e "/var/lib/systemd/linger/$user" ]; then
		if ! loginctl enable-linger "$user" 2>/dev/null; then
			# No logind on a bus (minimal images): the flag file is all
			# enable-linger records, and logind reads it when it starts.
			mkdir -p /var/lib/systemd/linger
			: >"/var/lib/systemd/linger/$user"
		fi
		changed "linger $user"
	fi
	# Synchronous, so the secrets step already finds /run/user/UID mounted.
	# Without it secrets go to /dev/shm instead: still tmpfs, so not fatal.
	systemctl start "user@$(id -u "$user").service" >&2 ||
		printf 'sand: could not start user@%s.service; secrets will use /dev/shm\n' "$(id -u "$user")" >&2
fi
