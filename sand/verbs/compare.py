"""``sand land --compare try-*``: the attempts of N forks, side by side.

Each fork's guest is asked, in one read-only exchange, about each of its declared
checkouts: the branch HEAD is on, the fork point (where ``fork/<vm>`` was made: the
oldest entry of that branch's reflog, written by the fork step's ``git checkout -b``),
the commits since it, and what changed since it (``git diff --shortstat`` of the
working tree against it, plus untracked files); then its agents' state file, read
as the deep check reads it. Only numbers, names and the state file cross; never a
diff or a file. The reply is NUL-framed with a fixed number of fields per checkout;
anything else is refused rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sand.agentstate import MAX_BYTES, STATE_FILE, AgentReport, cell, parse_state
from sand.errors import GuestCommandError
from sand.guest.runner import EXPAND, GuestRunner, failed, guest_path_arg
from sand.refname import branch_problem, is_object_id
from sand.terminal import decode, one_line

_FIELDS = 6  # per checkout, after its tag

COMPARE_SCRIPT = (
    EXPAND
    + r"""
set -u
export GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 LC_ALL=C
g() { git -C "$d" "$@" 2>/dev/null; }
slow() { timeout 5 git -C "$d" "$@" 2>/dev/null; }  # the calls that walk history or the tree
IFS= read -r -d '' fork || exit 2
while IFS= read -r -d '' p; do
	d=$(expand "$p")
	top=$(g rev-parse --show-toplevel) && [ -n "$top" ] ||
		{ printf 'missing\0%s\0' "$p"; continue; }
	d=$top
	branch=$(g symbolic-ref -q --short HEAD) || branch=""
	point=$(g reflog show --format=%H "refs/heads/$fork" -- | tail -n 1) || point=""
	ahead="" stat="" untracked=""
	if [ -n "$point" ]; then
		ahead=$(slow rev-list --count "$point..HEAD") || ahead=""
		stat=$(slow diff --shortstat "$point" --) || stat=""
		untracked=$(slow ls-files --others --exclude-standard | wc -l) || untracked=""
	fi
	printf 'checkout\0%s\0%s\0%s\0%s\0%s\0%s\0' "$p" "$branch" "$point" "${ahead// /}" \
		"$stat" "${untracked// /}"
done
printf 'agents\0'
head -c __MAX__ -- "$HOME/__STATE__" 2>/dev/null || true
""".replace("__MAX__", str(MAX_BYTES + 1)).replace("__STATE__", STATE_FILE)
)

_SHORTSTAT = re.compile(
    r" ?(\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?\(-\))?"
)


@dataclass(frozen=True)
class Attempt:
    """One checkout of a fork as its guest reported it (every string is guest data)."""

    path: str  # as declared (the manifest's, ~-relative)
    branch: str | None  # HEAD's branch; None: detached, or a name refused
    point: str | None  # the fork point; None: no fork/<vm> branch was ever made here
    ahead: int | None  # commits since the fork point (None: unknown)
    files: int = 0
    insertions: int = 0
    deletions: int = 0
    untracked: int = 0
    missing: bool = False  # no checkout at the path

    def changes(self) -> str:
        if self.missing:
            return "(no checkout)"
        if self.point is None:
            return "(no fork point)"
        parts = []
        if self.files:
            plural = "s" if self.files != 1 else ""
            parts.append(f"{self.files} file{plural} +{self.insertions} -{self.deletions}")
        if self.untracked:
            parts.append(f"{self.untracked} untracked")
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class ForkView:
    """A fork's attempt: its checkouts and its agents (None: the state was not read)."""

    vm: str
    attempts: tuple[Attempt, ...] = ()
    agents: AgentReport | None = None
    problem: str = ""  # why the guest could not be read (then nothing else is known)


async def read_fork(runner: GuestRunner, vm: str, repo_paths: Sequence[str]) -> ForkView:
    """One exchange with the fork's guest: its declared checkouts and its agents."""
    branch = f"fork/{vm}"
    if why := branch_problem(branch):
        return ForkView(vm, problem=f"{branch!r} is not a branch name: {why}")
    stdin = branch.encode() + b"\0" + b"".join(guest_path_arg(p) for p in repo_paths)
    res = await runner.run(COMPARE_SCRIPT, stdin=stdin, limit=1 << 20, timeout=60)
    if res.exit_status != 0:
        raise failed("fork comparison", res)
    return parse_reply(vm, res.stdout, repo_paths)


def parse_reply(vm: str, raw: bytes, repo_paths: Sequence[str]) -> ForkView:
    head, mark, state = raw.partition(b"agents\0")
    if not mark:
        raise _malformed("it does not end with the agents' state")
    tokens = [decode(t) for t in head.split(b"\0")]
    if tokens[-1] != "":
        raise _malformed("a field is not terminated")
    tokens.pop()
    attempts: list[Attempt] = []
    i = 0
    while i < len(tokens):
        tag = tokens[i]
        if tag == "missing" and i + 1 < len(tokens):
            attempts.append(Attempt(tokens[i + 1], None, None, None, missing=True))
            i += 2
        elif tag == "checkout" and i + _FIELDS < len(tokens):
            attempts.append(_attempt(tokens[i + 1 : i + 1 + _FIELDS]))
            i += 1 + _FIELDS
        else:
            raise _malformed(f"unexpected field {one_line(tag, 40)!r}")
    if [a.path for a in attempts] != list(repo_paths):
        raise _malformed("it does not answer for the checkouts asked about")
    return ForkView(vm, tuple(attempts), parse_state(state))


def _attempt(fields: list[str]) -> Attempt:
    path, branch, point, ahead, stat, untracked = fields
    if branch and branch_problem(branch):
        branch = ""
    if point and not is_object_id(point):
        raise _malformed("the fork point is not an object id")
    numbers = _SHORTSTAT.fullmatch(stat) if stat else None
    if stat and numbers is None:
        raise _malformed("the change summary is not git's")
    files, plus, minus = (int(n or 0) for n in numbers.groups()) if numbers else (0, 0, 0)
    return Attempt(
        path,
        branch or None,
        point or None,
        _count(ahead) if point else None,
        files,
        plus,
        minus,
        _count(untracked) or 0,
    )


def _count(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 10 else None


def _malformed(why: str) -> GuestCommandError:
    return GuestCommandError("fork comparison", 0, f"the guest's reply was refused: {why}")


def render(views: Sequence[ForkView], now: float) -> str:
    """One row per checkout of each fork: VM, PATH, BRANCH, AHEAD, CHANGED, AGENT."""
    table: list[tuple[str, ...]] = [
        ("VM", "PATH", "BRANCH", "AHEAD", "CHANGED SINCE THE FORK POINT", "AGENT")
    ]
    for view in views:
        if view.problem:
            table.append((view.vm, "-", "-", "-", one_line(view.problem, 160), "-"))
            continue
        agent = cell(view.agents, now)
        if not view.attempts:
            table.append((view.vm, "(no repos)", "-", "-", "-", agent))
        for a in view.attempts:
            branch = a.branch or ("-" if a.missing else "(detached)")
            ahead = "-" if a.ahead is None else str(a.ahead)
            row = (view.vm, a.path, branch, ahead, a.changes(), agent)
            table.append(tuple(one_line(x, 120) for x in row))
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    return "".join(
        "  ".join(c.ljust(widths[i]) for i, c in enumerate(line[:5])) + "  " + line[5] + "\n"
        for line in table
    )
