"""The landing sweep: a fixed, read-only git script in the guest, its output parsed.

The guest is asked only for metadata -- the branch, its upstream, how far it
is ahead of or behind its remote-tracking branch, the remote's URL and
default branch, whether the tree is dirty -- never a diff or a file. The
checkouts are the VM's manifest repos plus a bounded ``find ~ -maxdepth 4
-name .git`` (at most :data:`MAX_CHECKOUTS`, each history or tree walk under
a 5 s timeout, ``GIT_OPTIONAL_LOCKS=0`` so not even the index is rewritten). The
reply is NUL-framed with a fixed number of fields per checkout; anything else
is refused rather than guessed at.

It sits below both of its readers: ``sand land`` (:mod:`sand.verbs.land`)
shows it, and the unpushed-work guard (:mod:`sand.survey.guard`) reads it
before a VM that may hold a person's work is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sand.errors import GuestCommandError
from sand.guest.remotes import Repo, parse_remote
from sand.guest.runner import EXPAND, GuestRunner, failed, guest_path_arg
from sand.refname import branch_problem, is_object_id
from sand.terminal import decode, one_line

MAX_CHECKOUTS = 50
_FIELDS = 14

SWEEP_SCRIPT = (
    EXPAND
    + r"""
set -u
export GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 LC_ALL=C
max=__MAX__
g() { git -C "$d" "$@" 2>/dev/null; }
slow() { timeout 5 git -C "$d" "$@" 2>/dev/null; }  # the calls that walk history or the tree
candidates() {
	while IFS= read -r -d '' p; do expand "$p"; printf '\0'; done
	timeout 20 find "$HOME" -maxdepth 4 \( -name node_modules -o -name .cache -o -name .cargo \
		-o -name .npm \) -prune -o -name .git -prune -print0 2>/dev/null |
		while IFS= read -r -d '' p; do printf '%s\0' "${p%/.git}"; done
}
printf 'home\0%s\0' "$HOME"
declare -A seen
n=0
while IFS= read -r -d '' d; do
	top=$(g rev-parse --show-toplevel) && [ -n "$top" ] || continue
	[ -z "${seen[$top]+x}" ] || continue
	seen[$top]=1
	n=$((n + 1))
	if [ "$n" -gt "$max" ]; then printf 'truncated\0'; break; fi
	d=$top
	branch=$(g symbolic-ref -q --short HEAD) || branch=""
	head=$(g rev-parse -q --verify HEAD) || head=""
	upstream=$(g rev-parse -q --abbrev-ref --symbolic-full-name '@{upstream}') || upstream=""
	remote="" url=""
	if [ -n "$branch" ]; then
		for r in "$(g config --get "branch.$branch.pushRemote")" \
			"$(g config --get remote.pushDefault)" \
			"$(g config --get "branch.$branch.remote")" origin; do
			if [ -n "$r" ] && url=$(g remote get-url "$r"); then remote=$r; break; fi
		done
	fi
	tracking=0 ahead=0 behind=0 def=""
	if [ -n "$remote" ]; then
		if g rev-parse -q --verify "refs/remotes/$remote/$branch" >/dev/null; then
			tracking=1
			read -r ahead behind < <(slow rev-list --left-right --count \
				"HEAD...refs/remotes/$remote/$branch") || true
		elif [ -n "$head" ]; then
			ahead=$(slow rev-list --count HEAD --not --remotes) || ahead=0
		fi
		def=$(g symbolic-ref -q --short "refs/remotes/$remote/HEAD") || def=""
		def=${def#"$remote/"}
	fi
	dirty=0
	[ -z "$(slow status --porcelain --untracked-files=no | head -c 1)" ] || dirty=1
	# What deleting this VM would lose: commits no remote branch has (on any local
	# branch, or a detached HEAD), changed and untracked files, stashes.
	unpushed=$(slow rev-list --count HEAD --branches --not --remotes) || unpushed=0
	[ -n "$head" ] || unpushed=$(slow rev-list --count --branches --not --remotes) || unpushed=0
	changed=$(slow status --porcelain --untracked-files=normal | wc -l) || changed=0
	stashes=$(g rev-list --walk-reflogs --count refs/stash) || stashes=0
	printf 'checkout\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0%s\0' "$top" \
		"$branch" "$head" "$upstream" "$remote" "$url" "$tracking" "${ahead:-0}" "${behind:-0}" \
		"$def" "$dirty" "${unpushed:-0}" "${changed// /}" "${stashes:-0}"
done < <(candidates)
""".replace("__MAX__", str(MAX_CHECKOUTS))
)


@dataclass(frozen=True)
class Checkout:
    """One guest checkout as the sweep reported it; every string is guest data."""

    path: str
    branch: str | None  # None when detached or when the reported name was refused
    refused_branch: str | None  # why the reported name was refused
    head: str
    upstream: str
    has_remote: bool
    repo: Repo | None  # the GitHub repository the push remote names, if it is one
    tracking: bool  # refs/remotes/<remote>/<branch> exists: the branch is pushed
    ahead: int
    behind: int
    default_branch: str | None
    dirty: bool
    unpushed: int = 0  # commits on no remote branch (any local branch, or a detached HEAD)
    changed_files: int = 0  # modified, staged and untracked files (ignored ones excluded)
    stashes: int = 0

    @property
    def holds_work(self) -> bool:
        """Whether removing this checkout would lose something that exists nowhere else."""
        return bool(self.unpushed or self.changed_files or self.stashes)

    def work_summary(self) -> str:
        parts = []
        if self.unpushed:
            parts.append(f"{self.unpushed} commit(s) on no remote")
        if self.changed_files:
            parts.append(f"{self.changed_files} dirty file(s)")
        if self.stashes:
            parts.append(f"{self.stashes} stash(es)")
        branch = self.branch or ("(invalid name)" if self.refused_branch else "(detached)")
        return f"branch {branch}: " + ", ".join(parts or ["nothing unpushed"])

    def push_state(self) -> str:
        if self.branch is None:
            state = "invalid branch name" if self.refused_branch else "detached"
        elif not self.has_remote:
            state = "local-only"
        elif not self.tracking:
            state = f"unpushed (+{self.ahead})" if self.ahead else "not pushed"
        elif self.ahead and self.behind:
            state = f"diverged (+{self.ahead}/-{self.behind})"
        elif self.ahead:
            state = f"unpushed (+{self.ahead})"
        elif self.behind:
            state = f"behind (-{self.behind})"
        else:
            state = "pushed"
        return state + (", dirty" if self.dirty else "")

    def why_not_landable(self) -> str | None:
        """Why a PR cannot be opened for this checkout, or None when it can."""
        if self.branch is None:
            if self.refused_branch:
                return f"its branch name is refused ({self.refused_branch})"
            return "HEAD is detached"
        if not self.has_remote:
            return "it has no remote"
        if self.repo is None:
            return "its remote is not a GitHub repository"
        if not self.tracking:
            return f"branch {self.branch} is not pushed: push it from the guest first"
        if self.ahead:
            return f"branch {self.branch} has {self.ahead} unpushed commits: push them first"
        if self.branch == self.default_branch:
            return f"{self.branch} is the repository's default branch"
        return None


@dataclass(frozen=True)
class Sweep:
    home: str
    checkouts: tuple[Checkout, ...]
    truncated: bool

    def display_path(self, checkout: Checkout) -> str:
        path = checkout.path
        if self.home and path.startswith(self.home.rstrip("/") + "/"):
            path = "~/" + path[len(self.home.rstrip("/")) + 1 :]
        return one_line(path, 120)


async def sweep(runner: GuestRunner, repo_paths: Sequence[str]) -> Sweep:
    stdin = b"".join(guest_path_arg(p) for p in repo_paths)
    res = await runner.run(SWEEP_SCRIPT, stdin=stdin, limit=1 << 20, timeout=120)
    if res.exit_status != 0:
        raise failed("landing sweep", res)
    return parse_sweep(res.stdout)


def parse_sweep(raw: bytes) -> Sweep:
    """Parse the sweep's NUL-framed reply; refuse it whole if it is not well formed."""
    tokens = [decode(t) for t in raw.split(b"\0")]
    if not tokens or tokens[-1] != "":
        raise _malformed("it does not end with a field terminator")
    tokens.pop()
    if len(tokens) < 2 or tokens[0] != "home":
        raise _malformed("it does not start with the home directory")
    home, i = tokens[1], 2
    checkouts: list[Checkout] = []
    truncated = False
    while i < len(tokens):
        tag = tokens[i]
        if tag == "truncated" and i == len(tokens) - 1:
            truncated = True
            break
        if tag != "checkout" or i + _FIELDS >= len(tokens):
            raise _malformed(f"unexpected record {one_line(tag, 40)!r}")
        checkouts.append(_checkout(tokens[i + 1 : i + 1 + _FIELDS]))
        i += 1 + _FIELDS
    if len(checkouts) > MAX_CHECKOUTS:
        raise _malformed(f"more than {MAX_CHECKOUTS} checkouts")
    return Sweep(home, tuple(checkouts), truncated)


def _checkout(f: list[str]) -> Checkout:
    path, branch, head, upstream, remote, url, tracking, ahead, behind, default, dirty = f[:11]
    unpushed, changed, stashes = f[11:]
    problem = branch_problem(branch) if branch else None
    default_ok = default if default and branch_problem(default) is None else None
    return Checkout(
        path=path,
        branch=branch if branch and problem is None else None,
        refused_branch=problem,
        head=head if is_object_id(head) else "",
        upstream=upstream,
        has_remote=bool(remote),
        repo=parse_remote(url) if remote else None,
        tracking=_flag(tracking),
        ahead=_count(ahead),
        behind=_count(behind),
        default_branch=default_ok,
        dirty=_flag(dirty),
        unpushed=_count(unpushed),
        changed_files=_count(changed),
        stashes=_count(stashes),
    )


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise _malformed(f"flag {one_line(text, 20)!r} is not 0 or 1")
    return text == "1"


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise _malformed(f"count {one_line(text, 20)!r} is not a number")
    return int(text)


def _malformed(why: str) -> GuestCommandError:
    return GuestCommandError("landing sweep", 0, f"the guest's reply was refused: {why}")
