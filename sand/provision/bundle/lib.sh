# Sourced by every sand provisioning step (bash). Not executable on its own.
#
# Conventions every step follows:
# - Data arrives on stdin as NUL-terminated fields, never in argv: argv holds
#   only fixed paths and names the host validated, so no value can show up in
#   a process listing.
# - A step prints "sand:changed <what>" for every change it makes and nothing
#   of the kind otherwise, so a second run of an unchanged spec reports zero.
# - Files are written through a temp file in the destination's directory,
#   compared first, renamed into place; the EXIT trap removes any temp file a
#   failure leaves behind (for secrets: a partial file on tmpfs).
set -euo pipefail
umask 077
export LC_ALL=C

SAND_LIB=/usr/local/lib/sand/bundle
_sand_tmp=()
trap 'rm -f -- "${_sand_tmp[@]}"' EXIT

changed() { printf 'sand:changed %s\n' "$*"; }
die() { printf 'sand: %s\n' "$*" >&2; exit 1; }

# read_field VAR: the next NUL-terminated field from stdin.
read_field() { IFS= read -r -d '' "$1"; }

# expect_end KIND: the host always closes its records with "end"; a stream
# that stops before it was cut off and must not be half-applied.
expect_end() { [ "${1:-}" = end ] || die "the payload from the host was truncated"; }

# mode_of FILE: its permission bits, e.g. 600.
mode_of() { stat -c %a -- "$1"; }

# put_file DEST MODE < text: install the text at DEST when DEST differs.
# Returns 0 when it wrote, 1 when DEST already held exactly that -- and then
# it has touched nothing, not even DEST's directory.
put_file() {
	local dest=$1 mode=$2 text=""
	IFS= read -r -d '' text || true # all of stdin, byte for byte (text has no NUL)
	if [ -f "$dest" ] && [ ! -L "$dest" ] && [ "$(mode_of "$dest")" = "$mode" ] &&
		cmp -s -- "$dest" <(printf '%s' "$text"); then
		return 1
	fi
	_put "$dest" "$mode" < <(printf '%s' "$text")
}

# put_copy SRC DEST MODE: the same for a file's bytes (binaries included).
put_copy() {
	if [ -f "$2" ] && [ ! -L "$2" ] && [ "$(mode_of "$2")" = "$3" ] && cmp -s -- "$1" "$2"; then
		return 1
	fi
	_put "$2" "$3" <"$1"
}

# _put DEST MODE < bytes: through a temp file in DEST's directory (so on the
# same filesystem: a secret's partial file is on tmpfs too), renamed into place.
_put() {
	local tmp
	tmp=$(mktemp -- "$(dirname -- "$1")/.sand.XXXXXXXX")
	_sand_tmp+=("$tmp")
	cat >"$tmp"
	chmod "$2" -- "$tmp"
	mv -f -- "$tmp" "$1"
}

# put_block FILE NAME < content: keep one "# BEGIN NAME" .. "# END NAME" block
# in FILE holding content (empty content removes the block). The rest of the
# file is left as the user has it.
put_block() {
	local file=$1 name=$2 body current="" mode=644
	body=$(cat)
	if [ -f "$file" ]; then
		mode=$(mode_of "$file")
		current=$(awk -v b="# BEGIN $name" -v e="# END $name" \
			'$0 == b { skip = 1; next } $0 == e { skip = 0; next } !skip' "$file")
	elif [ -z "$body" ]; then
		return 1
	fi
	put_file "$file" "$mode" < <(
		if [ -n "$current" ]; then printf '%s\n' "$current"; fi
		if [ -n "$body" ]; then printf '# BEGIN %s\n%s\n# END %s\n' "$name" "$body" "$name"; fi
	)
}

# home_of USER
home_of() { getent passwd "$1" | cut -d: -f6; }

# expand VAR PATH: set VAR to PATH with '~' and '~/...' made the running
# user's home; absolute paths as they are.
expand() {
	case $2 in
	"~") printf -v "$1" '%s' "$HOME" ;;
	"~/"*) printf -v "$1" '%s' "$HOME/${2#"~/"}" ;;
	/*) printf -v "$1" '%s' "$2" ;;
	*) die "not an absolute or home-relative path: $2" ;;
	esac
}

# home_path VAR PATH: set VAR to PATH ('~' or '~/...') made the running user's
# home, refusing anything else: another form, a control character, a '.' or
# '..' segment, and a path that resolves (through symlinks already in the
# guest) outside the home directory. The host checked the same before sending
# it; this holds whatever sent the payload.
home_path() {
	local rel home resolved
	case $2 in
	"~") rel="" ;;
	"~/"*) rel=${2#"~/"} ;;
	*) die "not a path under the home directory: $2" ;;
	esac
	[[ $2 != *[[:cntrl:]]* ]] || die "a guest path contains a control character"
	case /$rel/ in */../* | */./*) die "a guest path has a '.' or '..' segment: $2" ;; esac
	home=$(realpath -e -- "$HOME") || die "the home directory $HOME does not exist"
	resolved=$(realpath -m -- "$home/$rel") || die "cannot resolve $2"
	case $resolved in "$home" | "$home"/*) ;; *) die "$2 resolves outside $HOME" ;; esac
	printf -v "$1" '%s' "$HOME${rel:+/$rel}"
}

# check_branch NAME: git's own rule for a branch name, and never an option.
check_branch() {
	[[ $1 != -* ]] && git check-ref-format --branch "$1" >/dev/null 2>&1 ||
		die "not a usable branch name: $1"
}

# exclude_envrc DIR: when DIR is inside a git checkout, keep sand's DIR/.envrc
# out of `git status` (and so out of an agent's `git add -A`) through the
# checkout's own .git/info/exclude. Prints the change it makes, if any.
exclude_envrc() {
	local top gitdir rel
	top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null) || return 0
	gitdir=$(git -C "$top" rev-parse --absolute-git-dir) || return 0
	rel=${1#"$top"}
	[ "$rel" != "$1" ] || return 0
	if ! grep -qxF -- "$rel/.envrc" "$gitdir/info/exclude" 2>/dev/null; then
		mkdir -p -- "$gitdir/info"
		printf '%s\n' "$rel/.envrc" >>"$gitdir/info/exclude"
		changed "git exclude $1/.envrc"
	fi
}

# forget_logins HOME [AGENT...]: remove every agent's login from HOME (what a person's
# login inside the guest wrote), but those of the AGENTs named. Each file is overwritten
# with zeros in place, then removed, so its bytes do not stay in the disk's blocks (a
# symbolic link is only removed). Prints a change line for each.
forget_logins() {
	local home=$1 agent file
	shift
	declare -A keep=()
	for agent do keep[$agent]=1; done
	declare -A login=(
		[claude]=$home/.claude/.credentials.json
		[codex]=$home/.codex/auth.json
		[opencode]=$home/.local/share/opencode/auth.json
		[pi]=$home/.pi/agent/auth.json
	)
	for agent in claude codex opencode pi; do
		[ -z "${keep[$agent]:-}" ] || continue
		file=${login[$agent]}
		if [ -L "$file" ]; then
			rm -f -- "$file"
		elif [ -f "$file" ]; then
			shred -n 0 -z -u -- "$file" || die "removing the $agent login in $home failed"
		else
			continue
		fi
		changed "$agent login removed from $home"
	done
}
