#!/bin/bash
# Step "toolchain" (root): Node.js with npm and the GitHub CLI, and Docker when
# the VM opts in. Only what is missing is installed: a node, npm, gh or docker
# already on PATH (from the image, the user or an earlier run) is left alone.
# argv: USER docker|no-docker (validated by the host). stdin: unused.
#
# Where each comes from:
# - Node.js (the LTS line NODE_MAJOR) from NodeSource's apt repository, gh from
#   GitHub's (cli.github.com). Each vendor's signing key is fetched over HTTPS
#   from the vendor when its package is first needed; apt then checks every
#   package against it.
# - When a vendor cannot be reached (no route out, a network with only a
#   Debian mirror), Debian's own packages instead: nodejs and npm (bookworm's
#   Node 18 line) or gh (an older release).
# - Docker is always Debian's docker.io.
# /var/lib/sand/toolchain/<tool> records where each came from, and so what
# sand may take away again: Docker, when the VM no longer opts in.
. "$(dirname -- "$0")/lib.sh"
user=$1 docker=$2
NODE_MAJOR=24
records=/var/lib/sand/toolchain
keyrings=/etc/apt/keyrings
sources=/etc/apt/sources.list.d
umask 022 # apt reads keys and source lists as its unprivileged _apt user
mkdir -p -- "$records" "$keyrings" "$sources"
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -q -o DPkg::Lock::Timeout=300 -o APT::Update::Error-Mode=any)

have() { command -v "$1" >/dev/null 2>&1; }
want_node="" want_gh="" want_docker=""
{ have node && have npm; } || want_node=1
have gh || want_gh=1
if [ "$docker" = docker ] && ! have docker; then want_docker=1; fi

# vendor NAME KEY-URL KEY-FILE SOURCE: add a vendor's apt source with its key.
# Fails (and adds nothing) when the key cannot be fetched: the vendor is out of reach.
vendor() {
	local name=$1 url=$2 key=$keyrings/$3 source=$4 tmp
	tmp=$(mktemp)
	_sand_tmp+=("$tmp")
	curl -fsSL --proto '=https' --tlsv1.2 --connect-timeout 10 --max-time 120 \
		-o "$tmp" -- "$url" 2>/dev/null || return 1
	install -m 644 -- "$tmp" "$key"
	printf '%s\n' "$source" >"$sources/sand-$name.list"
}
drop_vendors() {
	rm -f -- "$sources"/sand-nodesource.list "$sources"/sand-github-cli.list \
		"$keyrings"/sand-nodesource.asc "$keyrings"/sand-github-cli.gpg
}

if [ -n "$want_node$want_gh$want_docker" ]; then
	node_from=debian gh_from=debian
	if [ -n "$want_node" ] && vendor nodesource \
		https://deb.nodesource.com/gpgkey/nodesource-repo.gpg.key sand-nodesource.asc \
		"deb [signed-by=$keyrings/sand-nodesource.asc] https://deb.nodesource.com/node_$NODE_MAJOR.x nodistro main"; then
		node_from=nodesource
	fi
	if [ -n "$want_gh" ] && vendor github-cli \
		https://cli.github.com/packages/githubcli-archive-keyring.gpg sand-github-cli.gpg \
		"deb [arch=$(dpkg --print-architecture) signed-by=$keyrings/sand-github-cli.gpg] https://cli.github.com/packages stable main"; then
		gh_from=github
	fi
	if ! "${apt[@]}" update >&2; then
		# A vendor that gave its key but not its index, or a source an earlier
		# run added that is out of reach now: Debian's packages, from Debian alone.
		printf 'sand: apt-get update failed with the vendors'\'' sources; Debian alone now\n' >&2
		drop_vendors
		node_from=debian gh_from=debian
		"${apt[@]}" update >&2 || die "apt-get update failed (is the package mirror reachable?)"
	fi
	packages=()
	# NodeSource's nodejs carries npm; Debian packages npm on its own.
	if [ -n "$want_node" ]; then
		if [ "$node_from" = nodesource ]; then packages+=(nodejs); else packages+=(nodejs npm); fi
	fi
	[ -z "$want_gh" ] || packages+=(gh)
	[ -z "$want_docker" ] || packages+=(docker.io)
	"${apt[@]}" install -y --no-install-recommends -- "${packages[@]}" >&2 ||
		die "apt-get install failed for: ${packages[*]}"
	if [ -n "$want_node" ]; then
		{ have node && have npm; } || die "nodejs was installed but node or npm is not on PATH"
		put_file "$records/node" 644 <<<"$node_from" || true
		if [ "$node_from" = nodesource ]; then
			changed "node $(node --version) from deb.nodesource.com"
		else
			changed "node $(node --version) and npm from Debian (deb.nodesource.com out of reach)"
		fi
	fi
	if [ -n "$want_gh" ]; then
		have gh || die "gh was installed but is not on PATH"
		put_file "$records/gh" 644 <<<"$gh_from" || true
		if [ "$gh_from" = github ]; then
			changed "gh from cli.github.com"
		else
			changed "gh from Debian (cli.github.com out of reach)"
		fi
	fi
	if [ -n "$want_docker" ]; then
		have docker || die "docker.io was installed but docker is not on PATH"
		put_file "$records/docker" 644 <<<debian || true
		changed "docker from Debian (docker.io)"
	fi
fi

in_group() { id -nG -- "$1" | tr ' ' '\n' | grep -qxF -- "$2"; }
if [ "$docker" = docker ]; then
	# The socket is root:docker; the group is what lets the user (and its agents) use it.
	if getent group docker >/dev/null && ! in_group "$user" docker; then
		usermod -aG docker "$user"
		changed "user $user in group docker"
	fi
elif [ -f "$records/docker" ]; then
	# Only a Docker sand installed goes; one the image brought stays.
	"${apt[@]}" remove -y -- docker.io >&2 || die "apt-get remove docker.io failed"
	if getent group docker >/dev/null && in_group "$user" docker; then
		gpasswd -d "$user" docker >/dev/null
	fi
	rm -f -- "$records/docker"
	changed "docker removed"
fi
