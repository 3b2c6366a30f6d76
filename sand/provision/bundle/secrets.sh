#!/bin/bash
# Step "secrets" (as the user): put every scoped secret and repo token on
# tmpfs, wire direnv and git to them, and remove what is no longer declared.
# argv: none. stdin: NUL-terminated records, then "end":
#   env SCOPE SLUG NAME VALUE     one environment variable for a directory scope
#   git CHECKOUT SLUG CONTEXT TOKEN   a token git uses for that checkout only
#   broker URL HOSTS CREDENTIAL   git reaches HOSTS (space-separated) through the
#                                 host's broker at URL with this VM's credential
#   broker-env SCOPE SLUG NAME    at SCOPE, NAME_BROKER_URL is the broker's URL and
#                                 NAME_BROKER_CREDENTIAL_FILE the credential's file
# Values stay on stdin and tmpfs: they are never in argv, never on disk.
. "$(dirname -- "$0")/lib.sh"

uid=$(id -u)
fstype() { stat -f -c %T -- "$1" 2>/dev/null || true; }
runtime=/run/user/$uid
if [ -d "$runtime" ] && [ -O "$runtime" ] && [ "$(fstype "$runtime")" = tmpfs ]; then
	root=$runtime/sand other=/dev/shm/sand-$uid
elif [ "$(fstype /dev/shm)" = tmpfs ]; then
	root=/dev/shm/sand-$uid other=$runtime/sand
else
	die "neither $runtime nor /dev/shm is a tmpfs: refusing to put secrets on disk"
fi

private_dir() {  # a 0700 directory that is ours: never a symlink or someone else's
	if [ -L "$1" ] || { [ -e "$1" ] && [ ! -d "$1" ]; }; then die "$1 is not a directory"; fi
	mkdir -p -- "$1"
	[ -O "$1" ] || die "$1 is not owned by $(id -un)"
	[ "$(mode_of "$1")" = 700 ] || chmod 700 -- "$1"
}
private_dir "$root"
private_dir "$root/env"
private_dir "$root/git"

declare -A env_text=() scope_dir=() git_dir=() git_context=() git_token=()
kind="" broker_url="" broker_hosts="" broker_env=()
while read_field kind; do
	case $kind in
	env)
		read_field scope && read_field slug && read_field name && read_field value ||
			die "the payload from the host was truncated"
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "not an environment variable name: $name"
		home_path "scope_dir[$slug]" "$scope"
		printf -v quoted '%q' "$value"
		env_text[$slug]+="export $name=$quoted"$'\n'
		;;
	git)
		read_field checkout && read_field slug && read_field context && read_field token ||
			die "the payload from the host was truncated"
		home_path "git_dir[$slug]" "$checkout"
		git_context[$slug]=$context
		git_token[$slug]=$token
		;;
	broker)
		read_field broker_url && read_field broker_hosts && read_field token ||
			die "the payload from the host was truncated"
		[[ $broker_url =~ ^http://[A-Za-z0-9.-]+:[0-9]+$ ]] || die "not a broker URL: $broker_url"
		for host in $broker_hosts; do
			[[ $host =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$ ]] || die "not a host name: $host"
		done
		git_token[broker]=$token # no checkout's slug is "broker": they end in a hash
		;;
	broker-env)
		read_field scope && read_field slug && read_field name ||
			die "the payload from the host was truncated"
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "not an environment variable name: $name"
		home_path "scope_dir[$slug]" "$scope"
		broker_env+=("$slug" "$name")
		;;
	*) break ;;
	esac
done
expect_end "$kind"
# A brokered secret's place in the environment: where the broker is and the file of the
# credential (renewed at each delivery, so a running process always reads the current one).
for ((i = 0; i < ${#broker_env[@]}; i += 2)); do
	[ -n "$broker_url" ] || die "a brokered secret's variables without the broker's URL"
	slug=${broker_env[i]} name=${broker_env[i + 1]}
	printf -v quoted '%q' "$broker_url"
	env_text[$slug]+="export ${name}_BROKER_URL=$quoted"$'\n'
	printf -v quoted '%q' "$root/git/broker"
	env_text[$slug]+="export ${name}_BROKER_CREDENTIAL_FILE=$quoted"$'\n'
done

# What an earlier provision put on the other tmpfs (e.g. before linger made
# /run/user/UID permanent) goes: one place holds a VM's secrets.
if [ -d "$other" ] && [ -O "$other" ] && [ ! -L "$other" ]; then
	rm -rf -- "$other"
	changed "secrets moved to $root"
fi

# --- values on tmpfs -----------------------------------------------------------
for slug in "${!env_text[@]}"; do
	if put_file "$root/env/$slug.sh" 600 < <(
		printf '# sand: secrets for %s (tmpfs; gone at reboot until sand delivers them again)\n' \
			"${scope_dir[$slug]}"
		printf '%s' "${env_text[$slug]}"
	); then changed "secrets for ${scope_dir[$slug]}"; fi
done
for slug in "${!git_token[@]}"; do
	if put_file "$root/git/$slug" 600 < <(printf '%s\n' "${git_token[$slug]}"); then
		changed "git token for ${git_dir[$slug]:-the broker}"
	fi
done
for file in "$root"/env/*.sh; do
	[ -e "$file" ] || continue
	slug=${file##*/}
	slug=${slug%.sh}
	if [ -z "${env_text[$slug]+set}" ]; then rm -f -- "$file" && changed "secrets $slug removed"; fi
done
for file in "$root"/git/*; do
	[ -e "$file" ] || continue
	slug=${file##*/}
	if [ -z "${git_token[$slug]+set}" ]; then rm -f -- "$file" && changed "git token $slug removed"; fi
done

# --- git: each token only for its own checkout ----------------------------------
# ~/.gitconfig includes a per-checkout file only for repositories under that
# checkout (includeIf gitdir); that file points git's credential helper at the
# token on tmpfs. The token is not in the remote URL, .git/config or argv.
conf=$HOME/.config/sand/git
mkdir -p -- "$conf"
includes=""
for slug in $(printf '%s\n' "${!git_dir[@]}" | sort); do
	dir=${git_dir[$slug]}
	if put_file "$conf/$slug.gitconfig" 644 < <(
		printf '# Managed by sand: credentials for %s only (the token is on tmpfs).\n' "$dir"
		printf '[credential "%s"]\n' "${git_context[$slug]}"
		printf '\thelper =\n'
		printf '\thelper = %s %s\n' "$SAND_LIB/git-credential-sand" "$root/git/$slug"
		printf '\tusername = x-access-token\n'
	); then changed "git credentials for $dir"; fi
	includes+=$(printf '[includeIf "gitdir:%s/"]\n\tpath = %s' "$dir" "$conf/$slug.gitconfig")$'\n'
done
for file in "$conf"/*.gitconfig; do
	[ -e "$file" ] || continue
	slug=${file##*/}
	slug=${slug%.gitconfig}
	[ "$slug" != broker ] || [ -z "$broker_url" ] || continue
	if [ -z "${git_dir[$slug]+set}" ]; then rm -f -- "$file" && changed "git credentials $slug removed"; fi
done
# Brokered: git goes to the broker for the hosts of the brokered repositories, with
# this VM's broker credential; the broker attaches the real token on the host.
if [ -n "$broker_url" ]; then
	if put_file "$conf/broker.gitconfig" 644 < <(
		printf '# Managed by sand: git reaches these hosts through the broker (no token here).\n'
		printf '[credential "%s"]\n\thelper =\n' "$broker_url"
		printf '\thelper = %s %s\n' "$SAND_LIB/git-credential-sand" "$root/git/broker"
		for host in $broker_hosts; do
			printf '[url "%s/%s/"]\n\tinsteadOf = https://%s/\n' "$broker_url" "$host" "$host"
		done
	); then changed "git through the broker at $broker_url"; fi
	includes+=$(printf '[include]\n\tpath = %s' "$conf/broker.gitconfig")$'\n'
fi
if put_block "$HOME/.gitconfig" "sand git-credentials" < <(printf '%s' "$includes"); then
	changed "$HOME/.gitconfig"
fi

# --- direnv: each scope's .envrc loads its secrets (and enclosing scopes') -------
header='# Managed by sand: loads the secrets placed at this directory from tmpfs.'
ours() { [ -f "$1" ] && [ "$(head -n 1 -- "$1")" = "$header" ]; }
allow_dir=${XDG_DATA_HOME:-$HOME/.local/share}/direnv/allow
allowed() {  # direnv's own key: sha256 of "<abs path>\n<content>"
	local hash
	hash=$({ printf '%s\n' "$1"; cat -- "$1"; } | sha256sum)
	[ -f "$allow_dir/${hash%% *}" ]
}
command -v direnv >/dev/null 2>&1 || die "direnv is not installed"

# Scopes, shortest path first, so an enclosing scope's file is sourced before
# (and so is overridden by) a nested one's.
mapfile -t slugs < <(for s in "${!scope_dir[@]}"; do printf '%s %s\n' "${#scope_dir[$s]}" "$s"; done |
	sort -n | cut -d' ' -f2)
for slug in "${slugs[@]}"; do
	dir=${scope_dir[$slug]}
	envrc=$dir/.envrc
	(umask 022 && mkdir -p -- "$dir") # an ordinary directory: only .envrc goes in it
	if [ -e "$envrc" ] && ! ours "$envrc"; then
		die "$envrc exists and was not written by sand; move it away or choose another scope"
	fi
	if put_file "$envrc" 644 < <(
		printf '%s\n# No value is stored here; sand rewrites this file when it provisions.\n' "$header"
		for outer in "${slugs[@]}"; do
			o=${scope_dir[$outer]}
			if [ "$o" = "$dir" ] || [ "${dir#"$o"/}" != "$dir" ]; then
				f=$root/env/$outer.sh
				printf 'watch_file %s\n[ ! -r %s ] || . %s\n' "$f" "$f" "$f"
			fi
		done
	); then
		direnv allow "$dir" >&2
		changed "direnv scope $dir"
	elif ! allowed "$envrc"; then
		direnv allow "$dir" >&2
		changed "direnv allow $dir"
	fi
	exclude_envrc "$dir"
done

# Scopes sand managed before that are gone now: their .envrc goes too.
record=$HOME/.config/sand/scopes
if [ -f "$record" ]; then
	while IFS= read -r dir; do
		[ -n "$dir" ] || continue
		for slug in "${slugs[@]}"; do [ "${scope_dir[$slug]}" = "$dir" ] && continue 2; done
		if ours "$dir/.envrc"; then rm -f -- "$dir/.envrc" && changed "direnv scope $dir removed"; fi
	done <"$record"
fi
put_file "$record" 600 < <(for slug in "${slugs[@]}"; do printf '%s\n' "${scope_dir[$slug]}"; done) || true
