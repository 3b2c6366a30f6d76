#!/bin/bash
# Step "fork" (as the user): a fork's checkouts, copied from its source's disk, each
# put on a branch of its own, so the attempts never share a branch name when pushed;
# and the agents' logins its copy holds removed, but those its entry keeps.
# argv: the branch (fork/<vm>), the fork's name, then the agents whose login it keeps
# (``from.logins``; all validated by the host). stdin: NUL-terminated records
# "repo CHECKOUT", then "end".
#
# `git checkout -b BRANCH --` starts the branch at the source's HEAD (a detached one
# too) and carries the index and the working tree as they are: uncommitted and
# untracked work comes along, nothing is committed or stashed. A checkout already
# holding the branch is left alone (the fork's own work since), and so is a path
# with no commit (nothing to carry: the repos step made or makes it).
. "$(dirname -- "$0")/lib.sh"
branch=${1:-} name=${2:-}
[ -n "$branch" ] || die "no branch given"
check_branch "$branch"
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ ]] || die "not a VM name: $name"
shift 2

kind=""
while read_field kind; do
	[ "$kind" = repo ] || break
	read_field checkout || die "the payload from the host was truncated"
	home_path dir "$checkout"
	git -C "$dir" rev-parse -q --verify HEAD >/dev/null 2>&1 || continue
	git -C "$dir" rev-parse -q --verify "refs/heads/$branch" >/dev/null 2>&1 && continue
	git -C "$dir" checkout -q -b "$branch" -- >&2 ||
		die "putting $checkout on $branch failed"
	changed "repo $checkout on $branch"
done
expect_end "$kind"

# --- the source's agent logins: a fork gets only those its own entry grants --------
# Once per fork (a mark holds its name: a login made in the fork since is its own, and
# a fork of a fork is made anew); the agents named in argv keep theirs.
mark=$HOME/.config/sand/fork-logins
if [ "$(cat -- "$mark" 2>/dev/null || true)" != "$name" ]; then
	forget_logins "$HOME" "$@"
	mkdir -p -- "$(dirname -- "$mark")"
	printf '%s\n' "$name" >"$mark"
fi
