"""One provisioning run as one guest command: the ledger read, then only what changed.

The guest keeps a *ledger*, ``/var/lib/sand/ledger/<step>``, holding the digest of
each step's inputs (``steps.step_digest``), written only after that step succeeded.
A run is one SSH command, the fixed :data:`DRIVER` script (a constant, like every
guest script sand runs), talking over its stdin and stdout:

1. the host sends a *header* (NUL-terminated fields): a random nonce, a label for
   the guest's step log, the login user steps run as, the bundle digest, and per
   step its name, digest, who runs it, its timeout and argv (fixed paths and
   validated names only: values travel as payloads);
2. the driver compares the bundle and each digest with what the guest holds and
   answers one line, ``sand:need:<nonce> [bundle] [step]...``;
3. when nothing is needed the host closes stdin and the run is over: a no-op
   reprovision is this one exchange. Otherwise the host sends the bundle's tar
   (when needed) and the payloads of the needed steps only, each as a length field
   and its bytes, and the driver runs the needed steps in order, framing each one's
   output (``sand:step:<nonce> run|skip|done ...``), records each digest after its
   step succeeded, and appends a line per step to ``/var/lib/sand/step-log``.

A step's payload (secret values included) goes from the SSH channel through a pipe
into its script, as before: never into a file, argv or the log. Nothing of a
step's output can forge a frame: frames carry the nonce, which no step is given.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from sand.provision.bundle import GUEST_DIR, Bundle
from sand.provision.steps import TMPFS, Step, fields, step_digest

LEDGER_DIR = "/var/lib/sand/ledger"
STEP_LOG = "/var/lib/sand/step-log"
MAGIC = "sand-run-1"
NEED = "sand:need:"
FRAME = "sand:step:"
BUNDLE_STEP = "bundle"
# What the guest's `timeout` exits with when it stopped a step.
TIMED_OUT = 124
_LABEL = re.compile(r"^[A-Za-z0-9:._@-]{1,100}$")

# $0 = sand-run. Runs as root. stdin: the header, then (after the need line) payloads.
DRIVER = (
    f"B={GUEST_DIR}\nL={LEDGER_DIR}\nLOG={STEP_LOG}\nMAGIC={MAGIC}\n"
    + r"""
set -u
exec 2>&1
umask 022
export LC_ALL=C
fail() { printf 'sand: %s\n' "$*"; exit 90; }
field() { IFS= read -r -d '' "$1" || fail "the run's header was cut off"; }
now() {  # now VAR: the time, to the microsecond where bash tells it
  if [ -n "${EPOCHREALTIME:-}" ]; then printf -v "$1" '%s' "$EPOCHREALTIME"; else
    printf -v "$1" '%s' "$(date +%s.%N)"; fi
}
# What bash can read or write itself starts no process: under emulation (a TCG guest)
# each one costs tens of milliseconds, and a warm claim's run is a few short steps.
slurp() {  # slurp VAR FILE: FILE's text without its trailing newlines
  local -n into=$1
  into=""
  IFS= read -r -d '' into <"$2" || true
  while [[ $into == *$'\n' ]]; do into=${into%$'\n'}; done
}
field magic; [ "$magic" = "$MAGIC" ] || fail "not a sand run header"
field nonce; [[ $nonce =~ ^[0-9a-f]{16,64}$ ]] || fail "bad nonce"
field label; [[ $label =~ ^[A-Za-z0-9:._@-]{1,100}$ ]] || fail "bad label"
field user; [[ $user =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || fail "bad user"
field bundle; [[ $bundle =~ ^[0-9a-f]{64}$ ]] || fail "bad bundle digest"
field count; [[ $count =~ ^[0-9]{1,3}$ ]] || fail "bad step count"
names=() digests=() stores=() modes=() limits=() payloads=()
for ((i = 0; i < count; i++)); do
  field name; [[ $name =~ ^[a-z][a-z0-9-]{0,47}$ ]] || fail "bad step name"
  field digest; [[ $digest =~ ^([0-9a-f]{16,64}|-)$ ]] || fail "bad digest for $name"
  field store; [[ $store =~ ^(disk|tmpfs)$ ]] || fail "bad ledger place for $name"
  field mode; [[ $mode =~ ^(root|user)$ ]] || fail "bad mode for $name"
  field limit; [[ $limit =~ ^[0-9]{1,6}$ ]] || fail "bad timeout for $name"
  field payload; [[ $payload =~ ^[01]$ ]] || fail "bad payload flag for $name"
  field argc; [[ $argc =~ ^[0-9]{1,3}$ ]] || fail "bad argc for $name"
  declare -a "argv_$i=()"
  declare -n av="argv_$i"
  for ((j = 0; j < argc; j++)); do field a; av+=("$a"); done
  unset -n av
  names+=("$name") digests+=("$digest") stores+=("$store")
  modes+=("$mode") limits+=("$limit") payloads+=("$payload")
done
field end; [ "$end" = end ] || fail "the run's header has no end"

# A tmpfs record sits beside the user's secrets, where secrets.sh keeps them.
uid=""
while IFS=: read -r n _ u _; do
  if [ "$n" = "$user" ]; then uid=$u; break; fi
done </etc/passwd
[ -n "$uid" ] || uid=$(id -u "$user" 2>/dev/null) || uid=""
volatile=()
[ -z "$uid" ] || volatile=("/run/user/$uid/sand/.ledger" "/dev/shm/sand-$uid/.ledger")
recorded() {  # recorded STORE NAME DIGEST: the guest holds this digest for the step
  local d got
  if [ "$1" = disk ]; then
    [ -f "$L/$2" ] && slurp got "$L/$2" && [ "$got" = "$3" ]
    return
  fi
  for d in "${volatile[@]}"; do
    if [ -f "$d/$2" ] && [ ! -L "$d/$2" ] && slurp got "$d/$2" && [ "$got" = "$3" ]; then
      return 0
    fi
  done
  return 1
}
record() {  # record STORE NAME DIGEST, once the step succeeded
  local d=$L
  if [ "$1" = tmpfs ]; then
    d=""
    [ -z "$uid" ] || [ ! -d "/run/user/$uid/sand" ] || d=/run/user/$uid/sand/.ledger
    [ -n "$d" ] || [ -z "$uid" ] || [ ! -d "/dev/shm/sand-$uid" ] || d=/dev/shm/sand-$uid/.ledger
    [ -n "$d" ] || return 0
    for o in "${volatile[@]}"; do
      if [ "$o" != "$d" ] && { [ -e "$o/$2" ] || [ -L "$o/$2" ]; }; then rm -f -- "$o/$2"; fi
    done
    [ -d "$d" ] || mkdir -p -m 700 "$d"
  fi
  # In place: a record cut short holds no whole digest, so its step only runs again.
  printf '%s\n' "$3" >"$d/$2"
}
have_bundle=""
if [ -f "$B/DIGEST" ] && slurp got "$B/DIGEST" && [ "$got" = "$bundle" ]; then have_bundle=1; fi
need=() answer=""
[ -n "$have_bundle" ] || answer=" bundle"
for ((i = 0; i < count; i++)); do
  if [ "${digests[i]}" != - ] && recorded "${stores[i]}" "${names[i]}" "${digests[i]}"; then
    need+=("")
  else
    need+=(1) answer+=" ${names[i]}"
  fi
done
printf 'sand:need:%s%s\n' "$nonce" "$answer"
[ -n "$answer" ] || exit 0

# What the step log shows of a digest: never one kept on tmpfs (it covers secret values).
shown() {  # shown I VAR
  if [ "${stores[$1]}" = disk ]; then printf -v "$2" '%s' "${digests[$1]:0:16}"; else
    printf -v "$2" -; fi
}
length() { field n; [[ $n =~ ^[0-9]{1,10}$ ]] || fail "bad payload length"; }
[ -d "$L" ] || mkdir -p -m 755 "$L" "${LOG%/*}"
logline() {
  local at
  TZ=UTC0 printf -v at '%(%Y-%m-%dT%H:%M:%SZ)T' -1
  printf '%s %s %s %s %s %s\n' "$at" "$label" "$1" "$2" "$3" "$4" >>"$LOG"
}
if [ -z "$have_bundle" ]; then
  printf 'sand:step:%s run bundle\n' "$nonce"
  now t0
  length
  mkdir -p "${B%/*}"
  t=$(mktemp -d "${B%/*}/.bundle.XXXXXXXX")
  if head -c "$n" | tar -x -f - -C "$t" --no-same-owner &&
    [ "$(cat "$t/DIGEST" 2>/dev/null)" = "$bundle" ]; then
    chmod 755 "$t"; rm -rf "$B.old"
    if [ -e "$B" ]; then mv "$B" "$B.old"; fi
    mv "$t" "$B"; rm -rf "$B.old"
    printf 'sand:changed bundle %s\n' "$bundle"
    rc=0
  else
    rm -rf "$t"; printf 'sand: the bundle arrived damaged\n'; rc=1
  fi
  now t1
  printf 'sand:step:%s done bundle %s %s %s\n' "$nonce" "$rc" "$t0" "$t1"
  [ "$rc" = 0 ] || exit 1
fi
for ((i = 0; i < count; i++)); do
  name=${names[i]}
  if [ -z "${need[i]}" ]; then
    printf 'sand:step:%s skip %s\n' "$nonce" "$name"
    shown "$i" digest
    logline "$name" skipped - "$digest"
    continue
  fi
  printf 'sand:step:%s run %s\n' "$nonce" "$name"
  declare -n av="argv_$i"
  cmd=(timeout --kill-after=10 "${limits[i]}")
  [ "${modes[i]}" = root ] || cmd+=(sudo -n -H -u "$user" --)
  cmd+=("${av[@]}")
  unset -n av
  now t0
  if [ "${payloads[i]}" = 1 ]; then
    length
    # What the step left unread is drained, so that head takes exactly its n bytes off
    # stdin. A step that succeeded read its payload to its "end" record, which closes
    # it: with a payload that head writes at once (at most PIPE_BUF) there is nothing
    # to drain, and no process is started for it.
    head -c "$n" | {
      "${cmd[@]}" 2>&1
      rc=$?
      [ "$rc" = 0 ] && ((n <= 4096)) || cat >/dev/null
      exit "$rc"
    }
    rc=$?
  else
    "${cmd[@]}" </dev/null 2>&1
    rc=$?
  fi
  now t1
  printf 'sand:step:%s done %s %s %s %s\n' "$nonce" "$name" "$rc" "$t0" "$t1"
  shown "$i" digest
  if [ "$rc" != 0 ]; then
    logline "$name" failed "$rc" "$digest"
    exit 1
  fi
  if [ "${digests[i]}" != - ]; then record "${stores[i]}" "$name" "${digests[i]}"; fi
  logline "$name" ran 0 "$digest"
done
exit 0
"""
)


@dataclass(frozen=True)
class PlannedStep:
    """A step with the digest the ledger compares (``-``: always run, never recorded)."""

    step: Step
    digest: str


@dataclass
class Run:
    """One driver run: what the host sends, and how it reads the answers."""

    label: str
    user: str
    bundle: Bundle
    steps: Sequence[PlannedStep]
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))

    def __post_init__(self) -> None:
        if not _LABEL.match(self.label):
            raise ValueError(f"not a run label: {self.label!r}")

    def header(self) -> bytes:
        records: list[list[str]] = [
            [MAGIC, self.nonce, self.label, self.user, self.bundle.digest, str(len(self.steps))]
        ]
        for planned in self.steps:
            s = planned.step
            records.append(
                [
                    s.name,
                    planned.digest,
                    "tmpfs" if s.ledger == TMPFS else "disk",
                    "root" if s.as_root else "user",
                    str(int(s.timeout)),
                    "1" if s.stdin else "0",
                    str(len(s.argv)),
                    *s.argv,
                ]
            )
        return fields(*records)

    def needed(self, line: bytes) -> tuple[bool, list[str]]:
        """(bundle needed, the steps needed) from the driver's need line."""
        words = line.decode(errors="replace").strip().split()
        if not words or words[0] != NEED + self.nonce:
            raise ValueError("not this run's need line")
        wanted = words[1:]
        known = {p.step.name for p in self.steps}
        bundle = BUNDLE_STEP in wanted
        steps = [w for w in wanted if w != BUNDLE_STEP]
        if any(w not in known for w in steps):
            raise ValueError("the guest asked for a step this run does not have")
        return bundle, steps

    def payloads(self, bundle: bool, steps: Sequence[str]) -> bytes:
        """The bundle (when needed) and the needed steps' stdin, each length-prefixed."""
        out = bytearray()
        if bundle:
            out += f"{len(self.bundle.tar)}\0".encode() + self.bundle.tar
        wanted = set(steps)
        for planned in self.steps:
            s = planned.step
            if s.name in wanted and s.stdin:
                out += f"{len(s.stdin)}\0".encode() + s.stdin
        return bytes(out)

    def timeout(self, bundle: bool, steps: Sequence[str]) -> float:
        """How long the needed steps may take together, with a margin for each."""
        wanted = set(steps)
        total = sum(p.step.timeout + 15 for p in self.steps if p.step.name in wanted)
        return total + (120.0 if bundle else 0.0) + 30.0


@dataclass(frozen=True)
class Outcome:
    """What the driver said about one step (``bundle`` included)."""

    name: str
    ran: bool
    status: int | None = None  # None: it began but no end was framed (killed, cut off)
    seconds: float = 0.0
    output: str = ""  # what it printed, framed between its run and done lines


def read_frames(text: str, nonce: str) -> list[Outcome]:
    """Every step's outcome from the driver's output, in order."""
    prefix = f"{FRAME}{nonce} "
    outcomes: list[Outcome] = []
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if not line.startswith(prefix):
            if current is not None:
                lines.append(line)
            continue
        words = line[len(prefix) :].split()
        if len(words) == 2 and words[0] == "skip":
            outcomes.append(Outcome(words[1], ran=False))
        elif len(words) == 2 and words[0] == "run":
            current, lines = words[1], []
        elif len(words) == 5 and words[0] == "done" and words[1] == current:
            outcomes.append(
                Outcome(
                    current, True, _int(words[2]), _seconds(words[3], words[4]), "\n".join(lines)
                )
            )
            current, lines = None, []
    if current is not None:
        outcomes.append(Outcome(current, True, None, 0.0, "\n".join(lines)))
    return outcomes


def plan_run(label: str, user: str, bundle: Bundle, steps: Sequence[Step]) -> Run:
    return Run(label, user, bundle, [PlannedStep(s, step_digest(s, bundle, user)) for s in steps])


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _seconds(start: str, end: str) -> float:
    try:
        return max(0.0, float(end) - float(start))
    except ValueError:
        return 0.0
