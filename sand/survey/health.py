"""``sand status --deep``: is each running VM's guest fit for work, as declared?

A listing says a VM is running; it cannot say whether the guest answers SSH,
whether the agents the VM declares are installed, or whether its secrets are
still on the guest's tmpfs (a reboot empties it). Those answers cost one SSH
session per guest, so they are asked only with ``--deep``: at most
:data:`DEEP_PARALLELISM` guests at a time, each bounded by one timeout that
covers finding the endpoint, connecting and the check itself, so a hung guest
costs that timeout and never the whole report.

The check is one fixed script, run as the VM's user, with only validated names
on its argv (agent names, the tmpfs file names sand derives, environment
variable names). It prints one ``ok`` or ``missing`` per check and nothing
else; the host words every problem from its own data, so no guest text is
shown and no secret value is read (``grep -q`` only asks whether a variable is
set in the file).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sand.agentstate import (
    MAX_BYTES,
    PRESENCE_MARK,
    PRESENCE_MAX,
    STATE_FILE,
    UNREADABLE,
    AgentReport,
    GuestPresence,
    parse_presence,
    parse_state,
)
from sand.backends.protocol import Backend
from sand.defaults import GUEST_SSH_PATIENCE, GUEST_SSH_TRY
from sand.desired import DesiredVM
from sand.errors import SandError
from sand.guest.endpoint import GuestEndpoint
from sand.manifest.broker import broker_variables
from sand.observed import ObservedVM
from sand.plan.model import Plan
from sand.provision.checks import guest_path, slug
from sand.provision.steps import Step
from sand.terminal import one_line

if TYPE_CHECKING:
    from sand.guest.ssh import Connection

DEEP_PARALLELISM = 8
# Per guest, for everything: the connection gets the patience every path gives a
# running guest's SSH (sand.defaults, as sand shell has), and the check its own seconds.
DEEP_TIMEOUT = GUEST_SSH_PATIENCE + 15.0

# Agents are a closed set in the manifest; this is the same rule again for argv.
_AGENT = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Checks on argv, each a kind and its words; one line "ok" or "missing" per check:
#   agent NAME        NAME is executable where sand's agents step puts agents, or on PATH
#   env FILE VAR      the tmpfs file FILE (relative to sand's tmpfs root) sets VAR
#   file FILE         the tmpfs file FILE exists and is not empty (a repo token)
#   agents            last: who uses the guest (a presence line: the guest's clock, tmux
#                     clients attached and when they last came or went, SSH sessions
#                     besides this one; numbers only, or "unknown" without ps), a
#                     marker line, then the agents' state file, bounded (the guest's
#                     word, read as data: sand.agentstate), or a word saying it is there
#                     but cannot be read (a link, not a file, not readable): not "none"
# The tmpfs root is either of the two secrets.sh may choose.
AGENTS_MARK = "--sand-agents--"
HEALTH_SCRIPT = (
    f"AGENTS_MARK={AGENTS_MARK}\nAGENTS_FILE={STATE_FILE}\nAGENTS_MAX={MAX_BYTES + 1}\n"
    f"AGENTS_UNREADABLE={UNREADABLE}\n"
    f"PRESENCE_MARK={PRESENCE_MARK}\n"
    + r"""
uid=$(id -u) || exit 1
tmpfs() { for r in "/run/user/$uid/sand" "/dev/shm/sand-$uid"; do
  if [ -f "$r/$1" ] && [ ! -L "$r/$1" ]; then printf '%s' "$r/$1"; return 0; fi; done; return 1; }
say() { if "$@"; then echo ok; else echo missing; fi; }
agent() { [ -x "/usr/local/bin/$1" ] || [ -x "/usr/bin/$1" ] || [ -x "$HOME/.local/bin/$1" ] ||
  command -v -- "$1" >/dev/null 2>&1; }
env_set() { f=$(tmpfs "$1") && grep -q -- "^export $2=" "$f"; }
file_set() { f=$(tmpfs "$1") && [ -s "$f" ]; }
presence() {
  command -v ps >/dev/null 2>&1 || { echo "$PRESENCE_MARK unknown"; return; }
  c=0; t=0
  if command -v tmux >/dev/null 2>&1; then
    c=$(( $(tmux list-clients 2>/dev/null | wc -l) ))
    s="${TMUX_TMPDIR:-/tmp}/tmux-$uid/default"
    if [ -S "$s" ]; then t=$(stat -c %Z -- "$s" 2>/dev/null) || t=0; fi
  fi
  # One "sshd: USER@TTY" process per SSH connection (sshd-session since OpenSSH 9.8);
  # one of them is this check's own.
  n=$(( $(ps -e -o args= 2>/dev/null | grep -Ec '^sshd(-session)?: [^ ]+@(pts/[0-9]+|notty)$') ))
  echo "$PRESENCE_MARK $(date +%s) $c $t $(( n > 0 ? n - 1 : 0 ))"
}
while [ $# -gt 0 ]; do
  case $1 in
  agent) say agent "$2"; shift 2 ;;
  env) say env_set "$2" "$3"; shift 3 ;;
  file) say file_set "$2"; shift 2 ;;
  agents) presence; echo "$AGENTS_MARK"; f="$HOME/$AGENTS_FILE"
    if [ -L "$f" ] || { [ -e "$f" ] && { [ ! -f "$f" ] || [ ! -r "$f" ]; }; }; then
      echo "$AGENTS_UNREADABLE"
    elif [ -f "$f" ]; then head -c "$AGENTS_MAX" -- "$f"; fi; exit 0 ;;
  *) exit 2 ;;
  esac
done
"""
)


@dataclass(frozen=True)
class Check:
    """One thing the guest must have: its words for the script, its problem if absent."""

    words: tuple[str, ...]
    missing: str


@dataclass(frozen=True)
class Target:
    """A running VM whose guest is to be checked."""

    vm: DesiredVM
    observed: ObservedVM
    backend: Backend


class Findings(list[str]):
    """A guest's problems (a list, as every caller reads it), what its agents were
    doing when the same exchange read their state file, and who used the guest then
    (None: not read, or not a valid answer)."""

    agents: AgentReport | None = None
    presence: GuestPresence | None = None

    @classmethod
    def of(
        cls,
        problems: list[str],
        agents: AgentReport | None = None,
        presence: GuestPresence | None = None,
    ) -> Findings:
        found = cls(problems)
        found.agents = agents
        found.presence = presence
        return found


Probe = Callable[[Target, float], Awaitable[Findings]]
# A guest's endpoint, by what makes it the same guest in the same boot.
Endpoints = dict[tuple[str, ...], GuestEndpoint]


def endpoint_key(target: Target) -> tuple[str, ...]:
    o = target.observed
    return (
        target.vm.name,
        o.identity,
        o.node or "",
        o.address or "",
        o.details.get("boot", ""),
        o.details.get("ssh_port", ""),
    )


def guest_checks(vm: DesiredVM) -> list[Check]:
    """What ``vm`` declares its guest holds: its agents and its secrets (by name)."""
    if not vm.provision:
        return []  # sand put nothing there, so nothing is expected
    checks = []
    for agent in sorted(set(vm.agents)):
        if _AGENT.match(agent):
            checks.append(Check(("agent", agent), f"agent {agent} missing"))
    for s in sorted(vm.secrets, key=lambda s: (s.scope, s.env)):
        if not _ENV.match(s.env):
            continue  # provisioning refuses it; nothing was delivered to look for
        scope = guest_path(s.scope, f"scope of secret {s.name!r}")
        checks.append(
            Check(
                ("env", f"env/{slug(scope)}.sh", s.env),
                f"secret {s.name} missing (not on the guest's tmpfs for {scope})",
            )
        )
    brokered = {g.secret for g in vm.brokered}
    if brokered:
        names = ", ".join(sorted(brokered))
        checks.append(Check(("file", "git/broker"), f"broker credential missing (for {names})"))
    for g in vm.brokered:
        for scope, env in g.env:
            where = guest_path(scope, f"scope of secret {g.secret!r}")
            checks.append(
                Check(
                    ("env", f"env/{slug(where)}.sh", broker_variables(env)[0]),
                    f"broker variables of {g.secret} missing (not on the guest's tmpfs "
                    f"for {where})",
                )
            )
    for r in vm.repos:
        if r.token_secret and r.token_secret not in brokered:
            checkout = guest_path(r.path, f"path of repo {r.name!r}")
            checks.append(
                Check(
                    ("file", f"git/{slug(checkout)}"),
                    f"secret {r.token_secret} missing (the git token for {checkout})",
                )
            )
    return checks


def targets(plan: Plan, backends: Mapping[str, Backend]) -> list[Target]:
    """The VMs a deep status looks into: declared, seen, and running."""
    return [
        Target(c.desired, c.observed, backends[c.backend])
        for c in plan.changes
        if c.desired is not None
        and c.observed is not None
        and c.observed.power == "running"
        and c.backend in backends
    ]


async def check_health(
    todo: Sequence[Target],
    *,
    timeout: float = DEEP_TIMEOUT,
    parallelism: int = DEEP_PARALLELISM,
    probe: Probe | None = None,
) -> dict[str, Findings]:
    """VM name → its guest's problems (empty: every check passed), all VMs at once
    but at most ``parallelism`` at a time, each within ``timeout`` seconds."""
    run = probe or probe_guest
    gate = asyncio.Semaphore(parallelism)

    async def one(target: Target) -> tuple[str, Findings]:
        async with gate:
            return target.vm.name, await run(target, timeout)

    return dict(await asyncio.gather(*(one(t) for t in todo)))


async def probe_guest(
    target: Target, timeout: float, endpoints: Endpoints | None = None
) -> Findings:
    """One guest's problems: SSH first (nothing else can be known without it), then
    every declared agent and secret, in one read-only script. ``endpoints``: where
    the guest was reached before (the board's, across refreshes), kept when it answers,
    forgotten when it does not."""
    from sand.guest.ssh import connect

    phase = "ssh unreachable"
    key = endpoint_key(target)
    endpoint = endpoints.pop(key, None) if endpoints is not None else None
    try:
        async with asyncio.timeout(timeout):
            if endpoint is None:
                endpoint = await target.backend.endpoint(target.vm, target.observed, wait=timeout)
            # The tries' own deadline is sand's patience (the world's seconds, as for
            # sand shell); a shorter --timeout (the person's seconds) cuts it above.
            async with connect(
                endpoint, deadline=GUEST_SSH_PATIENCE, attempt_timeout=GUEST_SSH_TRY
            ) as conn:
                phase = "guest check"
                found = await _run_checks(conn, endpoint, target.vm)
                if endpoints is not None:
                    endpoints[key] = endpoint
                return found
    except TimeoutError:
        return Findings.of([f"{phase}: no answer within {timeout:g}s"])
    except SandError as exc:
        return Findings.of([f"{phase}: {one_line(str(exc), 300)}"])


def split_presence(head: bytes, report: AgentReport | None) -> tuple[bytes, GuestPresence | None]:
    """The check's answers without the presence line, and what that line said (None:
    not printed, or not an answer: then nobody is known to be away)."""
    answers, mark, line = head.rpartition(f"{PRESENCE_MARK} ".encode())
    if not mark or report is None:
        return head, None
    return answers, parse_presence(mark + line.rstrip(b"\n"), report)


async def _run_checks(conn: Connection, endpoint: GuestEndpoint, vm: DesiredVM) -> Findings:
    from sand.guest.runner import SshRunner
    from sand.guest.ssh import where

    checks = guest_checks(vm)
    # The agents' hooks write their state where this same exchange reads it, and who
    # uses the guest (the idle policy's facts) comes along.
    agents = bool(vm.provision and (vm.agents or vm.idle))
    if not checks and not agents:
        return Findings()
    words = [w for c in checks for w in c.words] + (["agents"] if agents else [])
    step = Step("health", ("/bin/sh", "-c", HEALTH_SCRIPT, "sand-health", *words), False)
    runner = SshRunner(conn, "health check", where=where(endpoint))
    limit = 64 * len(checks) + PRESENCE_MAX + len(AGENTS_MARK) + MAX_BYTES + 3
    result = await runner.run_command(
        step.command(endpoint.user, vm.user), limit=limit, timeout=None
    )
    head, marked, state = result.stdout.partition(f"{AGENTS_MARK}\n".encode())
    report = parse_state(state) if marked else None
    head, presence = split_presence(head, report)
    answers = head.decode(errors="replace").split()
    if result.exit_status != 0 or len(answers) != len(checks) or (agents and not marked):
        # The guest's own words stay there: the person needs to know the check could
        # not run (sudo refused, no /bin/sh), not what it printed.
        return Findings.of([f"guest check: could not run as {vm.user} (exit {result.exit_status})"])
    problems = []
    for check, answer in zip(checks, answers, strict=True):
        if answer == "missing":
            problems.append(check.missing)
        elif answer != "ok":
            return Findings.of([f"guest check: could not run as {vm.user} (unexpected answer)"])
    return Findings.of(problems, report, presence if report is not None else None)
