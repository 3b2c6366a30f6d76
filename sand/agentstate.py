"""What each agent on a guest is doing, as the guest's hooks wrote it (docs/agents.md).

Provisioning installs, for every declared agent, hooks that call the bundle's
``agent-state`` writer; it keeps one record per session in one guest file,
``~/.local/state/sand/agents.json``. ``sand status --deep`` and the board read that
file in the same SSH exchange as the guest's health check (:mod:`sand.survey.health`).

The file is the guest's word, and the guest is where the agents run: it is read
bounded (:data:`MAX_BYTES`), parsed as data, every field checked against a closed
set or cut and made inert before anyone sees it, and nothing is done with it beyond
its state (what the board shows, what a notification says, whether a VM is idle).
Stdlib and :mod:`sand.terminal` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sand.terminal import one_line

STATE_FILE = ".local/state/sand/agents.json"  # under the VM user's home
MAX_BYTES = 64 * 1024  # the writer keeps it far smaller; more is not its work
MAX_SESSIONS = 32  # the writer's own bound, again
AGENTS = ("claude", "codex", "opencode", "pi")
STATES = ("working", "needs-input", "idle", "done", "failed")
# Agents whose hooks cannot say a turn started: Codex's `notify` program is called only
# with `agent-turn-complete` (docs/agents.md), so a session of theirs recorded `done` may
# be in a new turn. Their sessions make what the guest's agents do unknown: never idle.
BLIND = ("codex",)
# What the guest's read prints for a state file that is there but cannot be read (a
# link, not a regular file, not readable by the VM's user): unknown, never "no agent".
UNREADABLE = "--sand-agents-unreadable--"
# The state a VM's AGENT cell names when its sessions differ: what needs a person
# first, then what is under way, then what has ended.
_URGENCY = ("needs-input", "failed", "working", "done", "idle")


@dataclass(frozen=True)
class AgentSession:
    agent: str  # one of AGENTS
    session: str  # inert, at most 64 characters
    state: str  # one of STATES
    since: int  # epoch seconds the session entered ``state``
    cwd: str  # inert, at most 200 characters ("" when not said)

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "session": self.session,
            "state": self.state,
            "since": self.since,
            "cwd": self.cwd,
        }


@dataclass(frozen=True)
class AgentReport:
    """A guest's sessions, and what was wrong with its file (None: nothing)."""

    sessions: tuple[AgentSession, ...] = ()
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sessions": [s.to_json() for s in self.sessions], "problem": self.problem}

    def headline(self) -> AgentSession | None:
        """The session the board's AGENT cell speaks of: the most urgent state, and of
        those the one longest in it."""
        if not self.sessions:
            return None
        return min(self.sessions, key=lambda s: (_URGENCY.index(s.state), s.since))

    @property
    def known(self) -> bool:
        """Whether no session may be working unseen: the file was read whole (a file not
        read, or a record of it left out, might have said one is working), and no session
        is of an agent that cannot report a turn's start (:data:`BLIND`)."""
        return self.unknown_why() is None

    def unknown_why(self) -> str | None:
        """Why what the agents do is not known (None: it is)."""
        if self.problem is not None:
            return self.problem
        blind = sorted(
            {f"{s.agent} session {s.session}" for s in self.sessions if s.agent in BLIND}
        )
        if blind:
            return (
                f"{', '.join(blind)}: Codex reports only a turn's end, so whether a turn runs "
                "now cannot be told"
            )
        return None

    def idle_since(self) -> int | None:
        """Since when no session has been working (None: one is working, or none ever
        reported)."""
        if not self.sessions or any(s.state == "working" for s in self.sessions):
            return None
        return max(s.since for s in self.sessions)


def parse_state(data: bytes) -> AgentReport:
    """The guest file's bytes (read at most ``MAX_BYTES + 1``) as sessions; a record
    that is not what the writer writes is left out, a file that is not JSON is a
    problem, and nothing in it is ever shown as it came."""
    if not data.strip():
        return AgentReport()
    if data.strip() == UNREADABLE.encode():
        return AgentReport(problem="agent state file cannot be read: not read")
    if len(data) > MAX_BYTES:
        return AgentReport(problem=f"agent state file over {MAX_BYTES // 1024} KiB: not read")
    try:
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return AgentReport(problem="agent state file is not JSON: not read")
    records = doc.get("sessions") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        return AgentReport(problem="agent state file holds no sessions list: not read")
    sessions = [s for s in (_session(r) for r in records) if s is not None]
    skipped = len(records) - len(sessions)
    sessions.sort(key=lambda s: s.since, reverse=True)
    problem = f"{skipped} malformed session record(s) left out" if skipped else None
    return AgentReport(tuple(sessions[:MAX_SESSIONS]), problem)


def report_from_json(data: object) -> AgentReport | None:
    """A status row's ``agents`` (``AgentReport.to_json``) again; None when not read."""
    if not isinstance(data, Mapping):
        return None
    records = data.get("sessions")
    sessions = [s for s in map(_session, records if isinstance(records, list) else []) if s]
    problem = data.get("problem")
    return AgentReport(tuple(sessions), one_line(problem, 200) if problem else None)


def _session(record: object) -> AgentSession | None:
    if not isinstance(record, Mapping):
        return None
    agent, state, since = record.get("agent"), record.get("state"), record.get("since")
    session, cwd = record.get("session"), record.get("cwd", "")
    if agent not in AGENTS or state not in STATES:
        return None
    if not isinstance(since, int) or isinstance(since, bool) or not 0 <= since < 2**40:
        return None
    if not isinstance(session, str) or not session or not isinstance(cwd, str):
        return None
    return AgentSession(str(agent), one_line(session, 64), str(state), since, one_line(cwd, 200))


def duration(seconds: float) -> str:
    """12s, 12m, 2h, 3d: the largest unit."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def state_words(state: str) -> str:
    """How a person reads a state: "needs input" rather than "needs-input"."""
    return state.replace("-", " ")


def cell(report: AgentReport | None, now: float) -> str:
    """The board's AGENT cell: "working 12m", "needs input 3m" (+N other sessions);
    "-" when nothing was read or no session has reported."""
    head = report.headline() if report is not None else None
    if report is None or head is None:
        return "-"
    more = len(report.sessions) - 1
    tail = f" +{more}" if more else ""
    return f"{state_words(head.state)} {duration(now - head.since)}{tail}"


def session_lines(report: AgentReport | None, now: float) -> list[str]:
    """One line per session for the detail pane and ``sand status --deep``."""
    if report is None:
        return []
    lines = [
        f"{s.agent} {s.session}: {state_words(s.state)} {duration(now - s.since)}"
        + (f" in {s.cwd}" if s.cwd else "")
        for s in report.sessions
    ]
    if report.problem:
        lines.append(report.problem)
    return lines


def counts(reports: Mapping[str, AgentReport]) -> Iterable[tuple[str, str, str, int]]:
    """(vm, agent, state, sessions) for every VM, agent and state seen: the metrics."""
    for vm, report in sorted(reports.items()):
        seen: dict[tuple[str, str], int] = {}
        for s in report.sessions:
            seen[(s.agent, s.state)] = seen.get((s.agent, s.state), 0) + 1
        for (agent, state), n in sorted(seen.items()):
            yield vm, agent, state, n


# The line the deep check's exchange prints before the agents' state: the guest's clock,
# the tmux clients attached to the VM user's server, when that server last saw its
# clients come or go (its socket's ctime: tmux flips the socket's x bit as the first
# client attaches and the last detaches), and the SSH sessions open besides the check's
# own. Numbers only, each bounded; anything else is not an answer.
PRESENCE_MARK = "--sand-presence--"
_PRESENCE = re.compile(
    rb"^" + PRESENCE_MARK.encode() + rb" ([0-9]{1,12}) ([0-9]{1,6}) ([0-9]{1,12}) ([0-9]{1,6})$"
)
PRESENCE_MAX = len(PRESENCE_MARK) + 40


@dataclass(frozen=True)
class GuestPresence:
    """Who uses a guest now, as its deep-check exchange told (docs/agents.md)."""

    now: int  # the guest's clock, epoch seconds: what the agents' ``since`` counts on
    tmux_clients: int
    tmux_changed: int  # epoch seconds; 0: no tmux server
    ssh_sessions: int
    agents: AgentReport = AgentReport()

    def to_json(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "tmux_clients": self.tmux_clients,
            "tmux_changed": self.tmux_changed,
            "ssh_sessions": self.ssh_sessions,
        }


def parse_presence(line: bytes, agents: AgentReport) -> GuestPresence | None:
    """The presence line (without its newline) as data; None when it is not one."""
    found = _PRESENCE.match(line)
    if found is None:
        return None
    now, clients, changed, sessions = (int(g) for g in found.groups())
    return GuestPresence(now, clients, changed, sessions, agents)
