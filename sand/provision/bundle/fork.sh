#!/bin/bash
# Step "fork" (as the user): a fork's checkouts, copied from its source's disk, each
# put on a branch of its own, so the attempts never share a branch name when pushed.
# argv: the branch (fork/<vm>, validated by the host). stdin: NUL-terminated records
# "repo CHECKOUT", then "end".
#
# `git checkout -b BRANCH --` starts the branch at the source's HEAD (a detached one
# too) and carries the index and the working tree as they are: uncommitted and
# untracked work comes along, nothing is committed or stashed. A checkout already
# holding the branch is left alone (the fork's own work since), and so is a path
# with no commit (nothing to carry: the repos step made or makes it).
. "$(dirname -- "$0")/lib.sh"
branch=${1:-}
[ -n "$branch" ] || die "no branch given"
check_branch "$branch"

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
