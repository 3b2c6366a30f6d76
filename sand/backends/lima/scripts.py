"""The few fixed POSIX sh scripts sand runs next to limactl (locally or on the remote host).

Each is a constant passed as ``sh -c SCRIPT NAME ARG...``: data (instance names, paths,
file contents) only ever arrives as positional arguments or on stdin, never spliced into
script text, so nothing read from a listing can become shell syntax. Instance names are
validated before they are passed, and the observe script re-checks directory names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MARKER_FILE = "sand-marker.json"
BASE_STAMP_FILE = "sand-base.json"
ASLEEP_FILE = "sand-asleep.json"  # the sleep sand put the instance to (empty: none)
SIDECARS = (MARKER_FILE, BASE_STAMP_FILE, ASLEEP_FILE)

# $1 = limactl, $2 = 1 to print `limactl --version` first, $3... = instance names (none:
# all). Prints frames "@sand KIND KEY LENGTH\n<LENGTH bytes>\n" (lengths in bytes: run
# with LC_ALL=C): the version, an "absent" frame per named instance with no directory,
# the listing (KEY = its exit status), then every sand sidecar file of the instances and,
# for each with a host agent, when that started ("hastart", KEY = instance, epoch seconds
# of ha.pid's mtime: GNU stat, else BSD stat on macOS).
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
  for f in sand-marker.json sand-base.json sand-asleep.json; do
    [ -f "$home/$n/$f" ] || continue
    c=$(cat -- "$home/$n/$f" 2>/dev/null) || continue
    frame file "$n/$f" "$c"
  done
  p=$home/$n/ha.pid
  [ -f "$p" ] || continue
  t=$(stat -c %Y -- "$p" 2>/dev/null || stat -f %m -- "$p" 2>/dev/null) || continue
  frame hastart "$n" "$t"
done
for f in "$home"/_sand/lease-*.json; do
  [ -f "$f" ] || continue
  n=${f##*/lease-}
  n=${n%.json}
  case $n in ''|*[!a-z0-9-]*) continue ;; esac
  c=$(cat -- "$f" 2>/dev/null) || continue
  frame lease "$n" "$c"
done
exit 0
"""

# Shared by the scripts that take content on stdin: ``whole FILE SIZE WHAT OUTCOME``
# copies stdin to FILE and keeps it only when it holds SIZE bytes. A sand killed before
# (or while) it wrote closes the script's stdin early, and what arrived cut short must
# never be used (an empty marker over a whole one, an instance made of half a config).
_WHOLE = r"""
set -eu
whole() {
  cat > "$1"
  n=$(wc -c < "$1" | tr -d ' ')
  [ "$n" = "$2" ] && return 0
  rm -f "$1"
  echo "sand: $3 arrived cut short ($n of $2 bytes); $4" >&2
  exit 4
}
"""

# $1 = the configuration's length, $2 = the instance name; then the limactl argv, to which
# the configuration's file is added. limactl never reads sand's pipe itself: a sand killed
# before it wrote the whole configuration (its pipe closed early) would have Lima create
# an instance from whatever arrived — nothing, here, and then of the --set values alone.
CREATE_FROM_STDIN = (
    _WHOLE
    + r"""
d=${LIMA_HOME:-$HOME/.lima}/_sand
mkdir -p "$d"
umask 077
f="$d/create-$$.yaml"
rm -f "$f"
whole "$f" "$1" "the configuration of $2" "nothing created"
shift 2
if "$@" "$f"; then rc=0; else rc=$?; fi
rm -f "$f"
exit "$rc"
"""
)

# $1 = instance name, $2 = sidecar file name, $3 = its length; stdin = the content.
# Atomic (rename), and only whole.
WRITE_SIDECAR = (
    _WHOLE
    + r"""
d=${LIMA_HOME:-$HOME/.lima}/$1
if [ ! -f "$d/lima.yaml" ]; then
  echo "sand: instance directory $d has no lima.yaml" >&2
  exit 3
fi
umask 077
whole "$d/$2.tmp" "$3" "$2 for $1" "left as it was"
mv -f "$d/$2.tmp" "$d/$2"
"""
)

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


# $1 = limactl, $2 = 1 to list Lima's templates, $3... = image locations (paths, URLs) to
# check. Read-only. Frames: the host's memory (bytes) and CPUs, the template names (KEY =
# the exit status of `limactl create --list-templates`), one "image" frame per location
# (KEY = 0 readable/answering, 1 not, - could not be checked; body = the location).
PREFLIGHT = r"""
frame() { printf '@sand %s %s %d\n%s\n' "$1" "$2" "${#3}" "$3"; }
limactl=$1 want_templates=$2
shift 2
mem=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo 2>/dev/null)
[ -n "$mem" ] || mem=$(sysctl -n hw.memsize 2>/dev/null) || mem=""
frame memory - "$mem"
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null) || cpus=$(sysctl -n hw.ncpu 2>/dev/null) || cpus=""
frame cpus - "$cpus"
if [ "$want_templates" = 1 ]; then
  t=$("$limactl" --tty=false create --list-templates 2>/dev/null)
  frame templates "$?" "$t"
fi
for img do
  case $img in
    http://*|https://*)
      if command -v curl >/dev/null 2>&1; then
        # One byte of the image (GET with a range: some hosts refuse HEAD).
        r=1
        curl -fsSL --max-time 15 -r 0-0 -o /dev/null -- "$img" 2>/dev/null && r=0
      else
        r=-
      fi ;;
    *)
      p=$img
      case $p in "~/"*) p=$HOME/${p#"~/"} ;; esac
      if [ -r "$p" ]; then r=0; else r=1; fi ;;
  esac
  frame image "$r" "$img"
done
exit 0
"""

# Prints "PID ARGS" of every process whose command line mentions limactl (none: nothing,
# also where ps is missing): a limactl start/stop/clone a killed sand left running goes
# on without it, and recovery waits for it. The caller picks out the ones that matter.
# The limactl processes that may act on this Lima home: this user's only (``ps -U``),
# and, where /proc shows a process's environment (Linux), only those whose LIMA_HOME
# (default ~/.lima, relative to their cwd) is this one. Elsewhere (macOS) a process of
# this user counts whatever its home: waiting too long is the safe side.
PROCESSES = r"""
home=${LIMA_HOME:-$HOME/.lima}
home=$(cd -- "$home" 2>/dev/null && pwd -P) || home=
ps -ww -U "$(id -u)" -o pid= -o args= 2>/dev/null | grep -F limactl | while read -r pid args; do
  env=/proc/$pid/environ
  if [ -n "$home" ] && [ -r "$env" ]; then
    h=$(tr '\0' '\n' < "$env" 2>/dev/null | sed -n 's/^LIMA_HOME=//p' | tail -n 1)
    if [ -z "$h" ]; then
      h=$(tr '\0' '\n' < "$env" 2>/dev/null | sed -n 's/^HOME=//p' | tail -n 1)/.lima
    fi
    case $h in /*) ;; *) h=/proc/$pid/cwd/$h ;; esac
    h=$(cd -- "$h" 2>/dev/null && pwd -P) || continue
    [ "$h" = "$home" ] || continue
  elif [ -d /proc/self ] && [ ! -e "/proc/$pid" ]; then
    continue  # it ended after ps listed it: another Lima home's limactl is no wait
  fi
  printf '%s %s\n' "$pid" "$args"
done
exit 0
"""


# The project's lease on the Lima host (``lease.py``): $1 = take or peek, $2 = project,
# $3 = ttl seconds. Perl, not sh: an flock(2) held for as long as the holder lives is
# what it needs, macOS has no flock(1), and perl is on every macOS and Debian
# (perl-base is Essential). The lock file is _sand/lease-PROJECT.lock under LIMA_HOME
# (Lima skips names starting with "_"); the record, written only by the holder, is
# lease-PROJECT.json beside it. Prints "busy RECORD" (another holds the lock) or "free
# RECORD" (peek) and ends; or "taken RECORD" and then serves its holder line by line:
# "write JSON" (the new record, written atomically) and "renew" answer "ok". It ends,
# and the kernel frees the lock, at EOF (the holder is gone: sand ended or was killed,
# or its SSH connection dropped) or when no line came for ttl seconds.
LEASE = r"""
use strict; use warnings; use Fcntl qw(:flock O_RDWR O_CREAT);
my ($mode, $project, $ttl) = @ARGV;
$| = 1;
umask 077;
my $home = $ENV{LIMA_HOME} || "$ENV{HOME}/.lima";
-d $home or mkdir($home, 0755) or die "sand: cannot make $home: $!\n";
my $dir = "$home/_sand";
-d $dir or mkdir($dir, 0700) or die "sand: cannot make $dir: $!\n";
my $info = "$dir/lease-$project.json";
sysopen(my $lock, "$dir/lease-$project.lock", O_RDWR | O_CREAT, 0600)
  or die "sand: cannot open the lease lock in $dir: $!\n";
sub record {
  open(my $in, '<', $info) or return '';
  local $/;
  my $text = <$in> // '';
  $text =~ s/[\r\n]+/ /g;
  return $text;
}
if (!flock($lock, LOCK_EX | LOCK_NB)) { print "busy ", record(), "\n"; exit 0; }
if ($mode ne 'take') { print "free ", record(), "\n"; exit 0; }
print "taken ", record(), "\n";
while (1) {
  my $line = eval {
    local $SIG{ALRM} = sub { die "expired\n" };
    alarm $ttl;
    my $got = <STDIN>;
    alarm 0;
    $got;
  };
  exit 0 unless defined $line;
  chomp $line;
  if ($line =~ /^write (.+)$/) {
    open(my $out, '>', "$info.tmp") or die "sand: cannot write $info.tmp: $!\n";
    print $out $1;
    close($out) or die "sand: cannot write $info.tmp: $!\n";
    rename("$info.tmp", $info) or die "sand: cannot replace $info: $!\n";
    print "ok\n";
  } elsif ($line eq 'renew') {
    print "ok\n";
  } else {
    exit 0;
  }
}
"""


def sh(script: str, name: str, *args: str) -> list[str]:
    """argv for ``sh -c SCRIPT NAME ARGS...`` ($0 is NAME, $1.. are ARGS)."""
    return ["sh", "-c", script, name, *args]


def observe_argv(limactl: str, *, version: bool, names: Sequence[str] = ()) -> list[str]:
    return sh(OBSERVE, "sand-observe", limactl, "1" if version else "0", *names)


def preflight_argv(limactl: str, *, templates: bool, images: Sequence[str]) -> list[str]:
    return sh(PREFLIGHT, "sand-preflight", limactl, "1" if templates else "0", *images)


def write_sidecar_argv(instance: str, filename: str, size: int) -> list[str]:
    """Write stdin (``size`` bytes, checked before it replaces anything) as a sidecar."""
    if filename not in SIDECARS:
        raise ValueError(f"not a sand sidecar: {filename}")
    return sh(WRITE_SIDECAR, "sand-write", instance, filename, str(size))


def remove_half_made_argv(instance: str) -> list[str]:
    return sh(REMOVE_HALF_MADE, "sand-remove", instance)


def read_file_argv(path: str) -> list[str]:
    return sh(READ_FILE, "sand-read", path)


def processes_argv() -> list[str]:
    return sh(PROCESSES, "sand-processes")


def lease_argv(mode: str, project: str, ttl: float) -> list[str]:
    if mode not in ("take", "peek"):
        raise ValueError(mode)
    # Whole seconds (perl's alarm), rounded up: the lock must outlive the holder's own
    # deadline (``sand.backends.fence``), never end before it.
    return ["perl", "-e", LEASE, mode, project, str(max(1, math.ceil(ttl)))]


def tail_argv(instance: str, filename: str, lines: int = 20) -> list[str]:
    return sh(TAIL_FILE, "sand-tail", instance, filename, str(lines))


def create_from_stdin_argv(size: int, name: str, limactl_argv: Sequence[str]) -> list[str]:
    """Run ``limactl_argv`` plus a file holding stdin (``size`` bytes, checked first)."""
    return sh(CREATE_FROM_STDIN, "sand-create", str(size), name, *limactl_argv)
