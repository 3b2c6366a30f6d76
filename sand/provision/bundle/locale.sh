#!/bin/bash
# Step "locale" (root): the guest's timezone and locale, as the VM declares
# them (the host filled in its own for what the manifest left out).
# argv: TIMEZONE LOCALE (names the host checked; checked again here against
# what this guest has: its tz database and glibc's list of locales).
#
# The files are written directly rather than through timedatectl or
# update-locale: those need a running systemd and dbus, which a container
# guest or a minimal image lacks, and they would write the same files.
. "$(dirname -- "$0")/lib.sh"
tz=$1 locale=$2

# --- timezone: /etc/localtime links into the tz database, /etc/timezone names it
[[ $tz =~ ^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$ ]] || die "not a timezone name: $tz"
zone=/usr/share/zoneinfo/$tz
[ -f "$zone" ] || die "timezone $tz is not in this guest's tz database ($zone is missing)"
# A link that already resolves to the same zone data is left as it is (tzdata
# links zones to each other, and systemd writes the link relative).
if [ ! -L /etc/localtime ] || [ "$(readlink -f /etc/localtime)" != "$(readlink -f "$zone")" ]; then
	tmp=/etc/.localtime.sand
	_sand_tmp+=("$tmp")
	ln -sfn -- "$zone" "$tmp"
	mv -Tf -- "$tmp" /etc/localtime
	changed "timezone $tz"
fi
if put_file /etc/timezone 644 <<<"$tz"; then changed "/etc/timezone"; fi

# --- locale: generated unless glibc has it built in, then the system default
# norm VAR NAME: glibc's normalised form of a locale name (en_US.UTF-8 -> en_US.utf8).
norm() {
	local name=$2 modifier="" charset
	if [[ $name == *@* ]]; then modifier=@${name#*@} name=${name%%@*}; fi
	if [[ $name == *.* ]]; then
		charset=${name#*.}
		charset=${charset,,}
		printf -v "$1" '%s.%s%s' "${name%%.*}" "${charset//-/}" "$modifier"
	else
		printf -v "$1" '%s%s' "$name" "$modifier"
	fi
}
[[ $locale =~ ^[A-Za-z0-9_.@-]+$ ]] || die "not a locale name: $locale"
norm want "$locale"
case $want in
C | POSIX | C.utf8) ;; # built into glibc: nothing to generate
*)
	supported=/usr/share/i18n/SUPPORTED
	[ -f "$supported" ] || die "cannot generate $locale: $supported is missing (the locales package)"
	entry=""
	while read -r name charset; do
		norm have "$name"
		if [ "$have" = "$want" ]; then entry="$name $charset" && break; fi
	done < <(grep -v '^#' "$supported")
	[ -n "$entry" ] || die "locale $locale is not one this guest's glibc supports (see $supported)"
	# /etc/locale.gen lists the locales locale-gen builds: uncomment the entry, or add it.
	if ! grep -qxF -- "$entry" /etc/locale.gen 2>/dev/null; then
		put_file /etc/locale.gen 644 < <(
			if [ -f /etc/locale.gen ]; then
				awk -v e="$entry" '$0 == "# " e { print e; found = 1; next } { print }
					END { if (!found) print e }' /etc/locale.gen
			else
				printf '%s\n' "$entry"
			fi
		) || true
		changed "/etc/locale.gen: $entry"
	fi
	if ! locale -a 2>/dev/null | grep -qxF -- "$want"; then
		# Debian's locale-gen builds what /etc/locale.gen lists (the name is
		# ignored); Ubuntu's reads no such file and builds the name it is given.
		locale-gen "${entry%% *}" >&2 || die "locale-gen failed for $locale"
		locale -a 2>/dev/null | grep -qxF -- "$want" || die "locale-gen did not build $locale"
		changed "locale $locale generated"
	fi
	;;
esac
# Read by pam_env for every login (SSH included): the default for the user's sessions.
if put_file /etc/default/locale 644 <<<"LANG=$locale"; then changed "/etc/default/locale"; fi
