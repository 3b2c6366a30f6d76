#!/bin/bash
# Step "packages" (root): apt packages the VM declares, plus what sand needs.
# argv: none. stdin: package names, NUL-terminated, then "end".
. "$(dirname -- "$0")/lib.sh"

wanted=()
while read_field name; do
	[ "$name" = end ] && break
	[[ $name =~ ^[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+~:-]+)?$ ]] ||
		die "not a Debian package name: $name"
	wanted+=("$name")
done
expect_end "${name:-}"
[ ${#wanted[@]} -gt 0 ] || exit 0

# One dpkg-query for all of them; an installed package shows as "ii".
declare -A installed=()
while read -r pkg status; do
	[ "${status:0:2}" = ii ] && installed[$pkg]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' -- "${wanted[@]%%=*}" 2>/dev/null || true)
missing=()
for spec in "${wanted[@]}"; do
	pkg=${spec%%=*}
	[ -n "${installed[${pkg%%:*}]:-}" ] || missing+=("$spec")
done
[ ${#missing[@]} -gt 0 ] || exit 0

export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -q -o DPkg::Lock::Timeout=300 -o APT::Update::Error-Mode=any)
"${apt[@]}" update >&2 || die "apt-get update failed (is the package mirror reachable?)"
"${apt[@]}" install -y --no-install-recommends -- "${missing[@]}" >&2 ||
	die "apt-get install failed for: ${missing[*]}"
changed "packages ${missing[*]}"
