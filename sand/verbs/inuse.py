"""Who uses a guest now, by name: what ``sand sleep`` refuses to stop without ``--force``.

A sleep by a person's decision ends what runs on the guest (a stop) or freezes it (a
hibernation): an agent's turn under way, a person typing in a shell. So before it, the
guest is asked, in one exchange run as the VM's user, what the idle policy reads (the
deep check's presence line and the agents' state file, :mod:`sand.survey.health`) and,
by name, the SSH sessions open besides this one (``sshd: USER@TTY`` processes that are
not an ancestor of the exchange itself) and the terminals of the tmux clients attached.
Names are the guest's word: only ``USER@TTY`` and ``/dev/pts/N`` shapes are kept,
bounded; anything else counts as a session with no name. A guest that does not answer,
or whose agents' file is not read whole, is not known to be unused: refused as well.
"""

from __future__ import annotations

import asyncio
import re
import time

from sand.agentstate import AgentReport, GuestPresence, parse_state
from sand.backends.protocol import Backend
from sand.desired import DesiredVM
from sand.errors import SandError
from sand.guest.runner import SshRunner
from sand.guest.ssh import connect, where
from sand.observed import STOPPED, ObservedVM
from sand.provision.steps import Step
from sand.survey.health import AGENTS_MARK, DEEP_TIMEOUT, HEALTH_SCRIPT, split_presence
from sand.terminal import one_line

# Printed before the health script's own "agents" answer: one line per SSH session
# (besides this exchange's) and per attached tmux client.
WHO_SCRIPT = r"""
p=$$; mine=" "
while [ -n "$p" ] && [ "$p" -gt 1 ] 2>/dev/null; do
  mine="$mine$p "
  p=$(sed -n 's/^.*) [A-Za-z] \([0-9][0-9]*\) .*$/\1/p' "/proc/$p/stat" 2>/dev/null)
done
ps -e -o pid=,args= 2>/dev/null | while read -r pid args; do
  case "$mine" in *" $pid "*) continue ;; esac
  case $args in "sshd: "*@*|"sshd-session: "*@*) echo "--sand-ssh-- ${args#*: }" ;; esac
done | head -n 64
if command -v tmux >/dev/null 2>&1; then
  tmux list-clients -F '--sand-tmux-- #{client_tty}' 2>/dev/null | head -n 64
fi
"""
_SSH = re.compile(r"^--sand-ssh-- ([A-Za-z0-9._-]{1,32}@(?:pts/[0-9]{1,6}|notty|tty[0-9]{1,3}))$")
_TMUX = re.compile(r"^--sand-tmux-- (/dev/pts/[0-9]{1,6})$")
MAX_NAMED = 8


class Unknown(SandError):
    """Whether anyone uses the guest could not be told."""


def users_of(lines: list[str], presence: GuestPresence) -> list[str]:
    """Who is attached, by name where the guest said one (``USER@TTY``, a tmux tty)."""
    ssh = [f"{m[1]} (SSH)" for m in map(_SSH.match, lines) if m]
    tmux = [f"a tmux client on {m[1]}" for m in map(_TMUX.match, lines) if m]
    said = ssh[:MAX_NAMED] + tmux[:MAX_NAMED]
    if not ssh and presence.ssh_sessions:
        said.append(f"{presence.ssh_sessions} SSH session(s)")
    if not tmux and presence.tmux_clients:
        said.append(f"{presence.tmux_clients} tmux client(s)")
    return said


def at_work(report: AgentReport, how: str) -> list[str]:
    """The agent sessions a sleep ``how`` would cut short: working ones; with a stop,
    those that wait for input too (the question lives only in the agent's memory)."""
    states = ("working", "needs-input") if how == STOPPED else ("working",)
    return [
        f"{s.agent} session {s.session} ({s.state.replace('-', ' ')})"
        for s in report.sessions
        if s.state in states
    ][:MAX_NAMED]


async def in_use(vm: DesiredVM, current: ObservedVM, backend: Backend, how: str) -> list[str]:
    """Who and what uses ``vm``'s guest now that a sleep ``how`` would end or freeze
    (empty: nobody); raises :class:`Unknown` when the guest cannot tell."""
    script = WHO_SCRIPT + HEALTH_SCRIPT
    step = Step("who", ("/bin/sh", "-c", script, "sand-who", "agents"), False)
    start = time.monotonic()
    try:
        async with asyncio.timeout(DEEP_TIMEOUT):
            endpoint = await backend.endpoint(vm, current, wait=DEEP_TIMEOUT)
            left = max(0.1, DEEP_TIMEOUT - (time.monotonic() - start))
            async with connect(endpoint, deadline=left) as conn:
                runner = SshRunner(conn, "who uses the guest", where=where(endpoint))
                result = await runner.run_command(
                    step.command(endpoint.user, vm.user), limit=256 * 1024, timeout=None
                )
    except TimeoutError:
        raise Unknown(f"the guest gave no answer within {DEEP_TIMEOUT:g}s") from None
    except SandError as exc:
        raise Unknown(one_line(str(exc), 300)) from exc
    head, marked, state = result.stdout.partition(f"{AGENTS_MARK}\n".encode())
    report = parse_state(state) if marked else None
    lines, presence = split_presence(head, report)
    if result.exit_status != 0 or report is None or presence is None:
        raise Unknown(f"the guest's answer was not one (exit {result.exit_status})")
    if not report.known:
        raise Unknown(f"its agents are unknown: {report.unknown_why()}")
    text = lines.decode(errors="replace").splitlines()
    return at_work(report, how) + users_of(text, presence)
