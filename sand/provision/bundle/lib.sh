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
# - What bash can tell or write itself is not asked of another program: in a guest
#   under emulation (a TCG VM) each process started costs tens of milliseconds, and a
#   warm claim's own steps are little else.
set -euo pipefail
umask 077
export LC_ALL=C

SAND_LIB=/usr/local/lib/sand/bundle
_sand_tmp=() # temp files not yet renamed into place
trap '[ "${#_sand_tmp[@]}" = 0 ] || rm -f -- "${_sand_tmp[@]}"' EXIT

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
	local text=""
	IFS= read -r -d '' text || true # all of stdin, byte for byte (text has no NUL)
	put_text "$1" "$2" "$text"
}

# put_text DEST MODE TEXT: put_file with the text as an argument (no pipe to feed).
put_text() {
	local dest=$1 mode=$2 text=$3 tmp
	if [ -f "$dest" ] && [ ! -L "$dest" ] && holds "$dest" "$text" &&
		[ "$(mode_of "$dest")" = "$mode" ]; then
		return 1
	fi
	_new_tmp tmp "$dest" "$mode" "$text"
	mv -f -- "$tmp" "$dest"
	_sand_tmp=("${_sand_tmp[@]:0:${#_sand_tmp[@]}-1}") # renamed: nothing left to remove
}

# holds FILE TEXT: FILE's bytes are exactly TEXT (which has no NUL).
holds() {
	local current=""
	[ -r "$1" ] || return 1
	if IFS= read -r -d '' current <"$1"; then return 1; fi # stopped at a NUL: not TEXT
	[ "$current" = "$2" ]
}

# _new_tmp VAR DEST MODE TEXT: a new file holding TEXT, with MODE (no execute bit),
# beside DEST (so on DEST's filesystem: a secret's partial file is on tmpfs too), made
# by bash itself: created exclusively (noclobber: never over an existing file),
# under a name no other process chose, its mode from the umask it is created with.
_new_tmp() {
	local name mask try
	[[ $3 =~ ^[0-6][0246][0246]$ ]] || die "not a mode for a text file: $3"
	printf -v mask '%o' $((8#777 & ~8#$3))
	for try in 1 2 3 4 5 6 7 8; do
		name=${2%/*}/.sand.${SRANDOM:-$RANDOM$RANDOM}$$
		if (umask "$mask" && set -C && printf '%s' "$4" >"$name") 2>/dev/null; then
			_sand_tmp+=("$name")
			printf -v "$1" '%s' "$name"
			return 0
		fi
	done
	die "cannot write a file beside $2"
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
	_sand_tmp=("${_sand_tmp[@]:0:${#_sand_tmp[@]}-1}")
}

# put_block FILE NAME < content: keep one "# BEGIN NAME" .. "# END NAME" block
# in FILE holding content (empty content removes the block). The rest of the
# file is left as the user has it.
put_block() {
	local file=$1 name=$2 body="" current="" mode=644 line skip="" text=""
	IFS= read -r -d '' body || true
	while [[ $body == *$'\n' ]]; do body=${body%$'\n'}; done
	if [ -f "$file" ]; then
		mode=$(mode_of "$file")
		while IFS= read -r line || [ -n "$line" ]; do # the last line too, newline or not
			if [ "$line" = "# BEGIN $name" ]; then
				skip=1
			elif [ "$line" = "# END $name" ]; then
				skip=""
			elif [ -z "$skip" ]; then
				current+=$line$'\n'
			fi
		done <"$file"
		while [[ $current == *$'\n' ]]; do current=${current%$'\n'}; done
	elif [ -z "$body" ]; then
		return 1
	fi
	if [ -n "$current" ]; then text=$current$'\n'; fi
	if [ -n "$body" ]; then text+="# BEGIN $name"$'\n'"$body"$'\n'"# END $name"$'\n'; fi
	put_text "$file" "$mode" "$text"
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
	[ -d "$HOME" ] || die "the home directory $HOME does not exist"
	if linked_below "$HOME" "$rel"; then # else it is the path it says, inside home
		home=$(realpath -e -- "$HOME") || die "the home directory $HOME does not exist"
		resolved=$(realpath -m -- "$home/$rel") || die "cannot resolve $2"
		case $resolved in "$home" | "$home"/*) ;; *) die "$2 resolves outside $HOME" ;; esac
	fi
	printf -v "$1" '%s' "$HOME${rel:+/$rel}"
}

# linked_below DIR REL: a symbolic link is on the way from DIR down to DIR/REL (REL has
# no '.' or '..' segment), up to the first part that does not exist yet.
linked_below() {
	local walk=$1 rest=$2 part
	while [ -n "$rest" ]; do
		part=${rest%%/*}
		if [ "$part" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
		[ -n "$part" ] || continue
		walk+=/$part
		[ ! -L "$walk" ] || return 0
		[ -e "$walk" ] || return 1
	done
	return 1
}

# check_branch NAME: git's own rule for a branch name, and never an option.
check_branch() {
	# A plain one-word name (main, trunk, release-2) is one by every rule git has;
	# anything else is asked of git itself.
	[[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$ && $1 != HEAD ]] && return 0
	[[ $1 != -* ]] && git check-ref-format --branch "$1" >/dev/null 2>&1 ||
		die "not a usable branch name: $1"
}

# exclude_envrc DIR: when DIR is inside a git checkout, keep sand's DIR/.envrc
# out of `git status` (and so out of an agent's `git add -A`) through the
# checkout's own .git/info/exclude. Prints the change it makes, if any.
exclude_envrc() {
	local top gitdir rel up=$1
	# No .git in DIR or above it: no checkout to ask git about.
	while [ -n "$up" ] && [ ! -e "$up/.git" ]; do up=${up%/*}; done
	[ -n "$up" ] || [ -e /.git ] || return 0
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
