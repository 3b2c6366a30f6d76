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
. "${0%/*}/lib.sh"

uid=$UID
# on_tmpfs DIR: DIR's filesystem (that of the last mount over its longest mount point
# in /proc/self/mounts; stat's answer where DIR is a link or there is no /proc) is tmpfs.
on_tmpfs() {
	local dev mnt type rest best=-1 found=""
	if [ -L "$1" ] || [ ! -r /proc/self/mounts ]; then
		[ "$(stat -f -c %T -- "$1" 2>/dev/null || true)" = tmpfs ]
		return
	fi
	while read -r dev mnt type rest; do
		mnt=${mnt//\\040/ }
		case $1/ in "${mnt%/}"/*) if ((${#mnt} >= best)); then best=${#mnt} found=$type; fi ;; esac
	done </proc/self/mounts
	[ "$found" = tmpfs ]
}
runtime=/run/user/$uid
if [ -d "$runtime" ] && [ -O "$runtime" ] && on_tmpfs "$runtime"; then
	root=$runtime/sand other=/dev/shm/sand-$uid
elif on_tmpfs /dev/shm; then
	root=/dev/shm/sand-$uid other=$runtime/sand
else
	die "neither $runtime nor /dev/shm is a tmpfs: refusing to put secrets on disk"
fi

# Three 0700 directories that are ours: never a symlink or someone else's.
missing=()
for dir in "$root" "$root/env" "$root/git"; do
	if [ -L "$dir" ] || { [ -e "$dir" ] && [ ! -d "$dir" ]; }; then die "$dir is not a directory"; fi
	[ -d "$dir" ] || missing+=("$dir")
done
[ "${#missing[@]}" = 0 ] || mkdir -p -- "${missing[@]}"
for dir in "$root" "$root/env" "$root/git"; do
	[ -O "$dir" ] || die "$dir is not owned by $(id -un)"
done
chmod 700 -- "$root" "$root/env" "$root/git" # one process, where a look at each was three

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
	printf -v text '# sand: secrets for %s (tmpfs; gone at reboot until sand delivers them again)\n%s' \
		"${scope_dir[$slug]}" "${env_text[$slug]}"
	if put_text "$root/env/$slug.sh" 600 "$text"; then changed "secrets for ${scope_dir[$slug]}"; fi
done
for slug in "${!git_token[@]}"; do
	if put_text "$root/git/$slug" 600 "${git_token[$slug]}"$'\n'; then
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
# sorted VAR WORD...: the words in byte order (LC_ALL=C), into the array VAR.
sorted() {
	local -n into=$1
	local word i
	into=()
	shift
	for word do
		for ((i = ${#into[@]}; i > 0; i--)); do
			[[ ${into[i - 1]} > $word ]] || break
			into[i]=${into[i - 1]}
		done
		into[i]=$word
	done
}

conf=$HOME/.config/sand/git
[ -d "$conf" ] || mkdir -p -- "$conf"
includes=""
sorted git_slugs "${!git_dir[@]}"
for slug in "${git_slugs[@]}"; do
	dir=${git_dir[$slug]}
	printf -v text '%s\n' \
		"# Managed by sand: credentials for $dir only (the token is on tmpfs)." \
		"[credential \"${git_context[$slug]}\"]" \
		$'\thelper =' \
		$'\thelper = '"$SAND_LIB/git-credential-sand $root/git/$slug" \
		$'\tusername = x-access-token'
	if put_text "$conf/$slug.gitconfig" 644 "$text"; then changed "git credentials for $dir"; fi
	printf -v text '[includeIf "gitdir:%s/"]\n\tpath = %s\n' "$dir" "$conf/$slug.gitconfig"
	includes+=$text
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
	includes+="[include]"$'\n\t'"path = $conf/broker.gitconfig"$'\n'
fi
if put_block "$HOME/.gitconfig" "sand git-credentials" <<<"$includes"; then
	changed "$HOME/.gitconfig"
fi

# --- direnv: each scope's .envrc loads its secrets (and enclosing scopes') -------
header='# Managed by sand: loads the secrets placed at this directory from tmpfs.'
ours() {
	local first=""
	[ -f "$1" ] && { IFS= read -r first <"$1" || true; } && [ "$first" = "$header" ]
}
allow_dir=${XDG_DATA_HOME:-$HOME/.local/share}/direnv/allow
allowed() {  # direnv's own key: sha256 of "<abs path>\n<content>"
	local hash
	hash=$({ printf '%s\n' "$1"; cat -- "$1"; } | sha256sum)
	[ -f "$allow_dir/${hash%% *}" ]
}
command -v direnv >/dev/null 2>&1 || die "direnv is not installed"

# Scopes, shortest path first, so an enclosing scope's file is sourced before
# (and so is overridden by) a nested one's.
# (sorted as "<length, 5 digits> <slug>": a path is far shorter than 100000 bytes)
keys=()
for s in "${!scope_dir[@]}"; do printf -v key '%05d %s' "${#scope_dir[$s]}" "$s" && keys+=("$key"); done
sorted keys "${keys[@]}"
slugs=("${keys[@]#* }")
for slug in "${slugs[@]}"; do
	dir=${scope_dir[$slug]}
	envrc=$dir/.envrc
	[ -d "$dir" ] || (umask 022 && mkdir -p -- "$dir") # an ordinary directory: only .envrc goes in it
	if [ -e "$envrc" ] && ! ours "$envrc"; then
		die "$envrc exists and was not written by sand; move it away or choose another scope"
	fi
	text="$header"$'\n# No value is stored here; sand rewrites this file when it provisions.\n'
	for outer in "${slugs[@]}"; do
		o=${scope_dir[$outer]}
		if [ "$o" = "$dir" ] || [ "${dir#"$o"/}" != "$dir" ]; then
			f=$root/env/$outer.sh
			printf -v line 'watch_file %s\n[ ! -r %s ] || . %s\n' "$f" "$f" "$f"
			text+=$line
		fi
	done
	if put_text "$envrc" 644 "$text"; then
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
text=""
for slug in "${slugs[@]}"; do text+=${scope_dir[$slug]}$'\n'; done
put_text "$record" 600 "$text" || true
