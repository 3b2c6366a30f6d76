"""The few fixed POSIX sh scripts sand runs next to limactl (locally or on the remote host).

Each is a constant passed as ``sh -c SCRIPT NAME ARG...``: data (instance names, paths,
file contents) only ever arrives as positional arguments or on stdin, never spliced into
script text, so nothing read from a listing can become shell syntax. Instance names are
validated before they are passed, and the observe script re-checks directory names.
"""

from __future__ import annotations

from collections.abc import Sequence

MARKER_FILE = "sand-marker.json"
BASE_STAMP_FILE = "sand-base.json"
SIDECARS = (MARKER_FILE, BASE_STAMP_FILE)

# $1 = limactl, $2 = 1 to print `limactl --version` first, $3... = instance names (none:
# all). Prints frames "@sand KIND KEY LENGTH\n<LENGTH bytes>\n" (lengths in bytes: run
# with LC_ALL=C): the version, an "absent" frame per named instance with no directory,
# the listing (KEY = its exit status), then every sand sidecar file of the instances.
OBSERVE = r"""
home=${LIMA_HOME:-$HOME/.lima}
frame() { printf '@sand %s %s %d\n%s\n' "$1" "$2" "${#3}" "$3"; }
limactl=$1
if [ "$2" = 1 ]; then
  v=$("$limactl" --tty=false --version 2>/dev/null) || v=""
  frame version - "$v"
fi
shift 2
named=$#
for n do
  shift
  if [ -d "$home/$n" ]; then set -- "$@" "$n"; else frame absent "$n" ""; fi
done
if [ "$named" -gt 0 ] && [ $# -eq 0 ]; then
  frame list 0 ""
  exit 0
fi
out=$("$limactl" --tty=false list --json "$@")
rc=$?
frame list "$rc" "$out"
if [ $# -eq 0 ]; then
  for d in "$home"/*/; do
    [ -d "$d" ] || continue
    n=${d%/}
    set -- "$@" "${n##*/}"
  done
fi
for n do
  case $n in
    _*|.*|*[!A-Za-z0-9._-]*) continue ;;
  esac
  for f in sand-marker.json sand-base.json; do
    [ -f "$home/$n/$f" ] || continue
    c=$(cat -- "$home/$n/$f" 2>/dev/null) || continue
    frame file "$n/$f" "$c"
  done
done
exit 0
"""

# $1 = instance name, $2 = sidecar file name; stdin = the content. Atomic (rename).
WRITE_SIDECAR = r"""
set -eu
d=${LIMA_HOME:-$HOME/.lima}/$1
if [ ! -f "$d/lima.yaml" ]; then
  echo "sand: instance directory $d has no lima.yaml" >&2
  exit 3
fi
umask 077
cat > "$d/$2.tmp"
mv -f "$d/$2.tmp" "$d/$2"
"""

# $1 = instance name. Removes a directory that has no lima.yaml: what an interrupted
# `limactl clone` (or delete) leaves, which `limactl delete` refuses since Lima 2.2.
REMOVE_HALF_MADE = r"""
set -eu
d=${LIMA_HOME:-$HOME/.lima}/$1
[ -e "$d" ] || exit 0
if [ -e "$d/lima.yaml" ]; then
  echo "sand: refusing to remove $d: it has a lima.yaml" >&2
  exit 3
fi
rm -rf -- "$d"
"""

# $1 = a file; prints it (or fails).
READ_FILE = r"""
exec cat -- "$1"
"""

# $1 = instance name, $2 = file in its directory, $3 = lines: a log tail for messages.
TAIL_FILE = r"""
exec tail -n "$3" -- "${LIMA_HOME:-$HOME/.lima}/$1/$2"
"""


# Prints "PID ARGS" of every process whose command line mentions limactl (none: nothing,
# also where ps is missing): a limactl start/stop/clone a killed sand left running goes
# on without it, and recovery waits for it. The caller picks out the ones that matter.
PROCESSES = r"""
ps -A -o pid= -o args= 2>/dev/null | grep -F limactl
exit 0
"""


def sh(script: str, name: str, *args: str) -> list[str]:
    """argv for ``sh -c SCRIPT NAME ARGS...`` ($0 is NAME, $1.. are ARGS)."""
    return ["sh", "-c", script, name, *args]


def observe_argv(limactl: str, *, version: bool, names: Sequence[str] = ()) -> list[str]:
    return sh(OBSERVE, "sand-observe", limactl, "1" if version else "0", *names)


def write_sidecar_argv(instance: str, filename: str) -> list[str]:
    if filename not in SIDECARS:
        raise ValueError(f"not a sand sidecar: {filename}")
    return sh(WRITE_SIDECAR, "sand-write", instance, filename)


def remove_half_made_argv(instance: str) -> list[str]:
    return sh(REMOVE_HALF_MADE, "sand-remove", instance)


def read_file_argv(path: str) -> list[str]:
    return sh(READ_FILE, "sand-read", path)


def processes_argv() -> list[str]:
    return sh(PROCESSES, "sand-processes")


def tail_argv(instance: str, filename: str, lines: int = 20) -> list[str]:
    return sh(TAIL_FILE, "sand-tail", instance, filename, str(lines))
