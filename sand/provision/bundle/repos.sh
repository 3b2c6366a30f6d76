#!/bin/bash
# Step "repos" (as the user): clone each repo into its checkout path, once.
# argv: none. stdin: NUL-terminated records "CHECKOUT URL BRANCH" (BRANCH may
# be empty: the remote's default), then "end".
#
# A new checkout is one `git clone --no-checkout` into the checkout's own path (or,
# when that directory holds something already, e.g. a secret's .envrc, into a
# directory inside it whose .git is then moved up), so that git reads the checkout's
# includeIf config (its credential helper, set up by the "secrets" step) from the
# first request on: the token is never in the URL, in .git/config or in argv. The
# clone's one connection also says the remote's default branch (its HEAD): no second
# connection asks for it. A checkout an earlier run left half-made (a .git with no
# commit) is fetched into instead. An existing checkout is left alone (it is the
# agent's work); only its origin URL is kept as declared.
#
# The host validated every field; they are checked again here (a URL that is
# an option or a "transport::" address, a branch that is not one, a path that
# leaves the home directory), every git argv puts "--" before its operands,
# and GIT_ALLOW_PROTOCOL keeps git to the transports a manifest may name (no
# ext::, which runs a command).
. "${0%/*}/lib.sh"
export GIT_TERMINAL_PROMPT=0 GCM_INTERACTIVE=never GIT_ALLOW_PROTOCOL=file:git:http:https:ssh
umask 022 # a checkout is ordinary files, not secrets

# clone_new DIR URL BRANCH CHECKOUT: a new checkout, from one connection to the remote.
clone_new() {
	local dir=$1 url=$2 branch=$3 into=$1 head
	if [ -e "$dir" ]; then
		into=$dir/.sand-clone # left by a run killed mid-clone: made again
		[ ! -e "$into" ] || rm -rf -- "$into"
	fi
	git clone -q --no-checkout ${branch:+"--branch=$branch"} -- "$url" "$into" >&2 ||
		die "fetching $url into $4 failed"
	if [ "$into" != "$dir" ]; then
		mv -- "$into/.git" "$dir/.git" && rmdir -- "$into" || die "moving the clone into $4 failed"
	fi
	if [ -z "$branch" ]; then
		IFS= read -r head <"$dir/.git/HEAD" || head=""
		branch=${head#"ref: refs/heads/"}
		# The remote chose this one: refused as any branch, and the clone removed with it
		# (else the next run would take it for the agent's checkout and keep it).
		if [ "$branch" = "$head" ] || ! (check_branch "$branch"); then
			rm -rf -- "$dir/.git"
			die "$url has no usable default branch (${branch:-none}); set the repo's branch"
		fi
	fi
	git -C "$dir" checkout -q -B "$branch" --track "origin/$branch" -- >&2 ||
		die "checking out $branch in $4 failed"
	# origin/HEAD is the remote's default (the clone set it), or the declared branch.
	[ -z "$3" ] || git -C "$dir" remote set-head -- origin "$branch" >&2
}

# fetch_into DIR URL BRANCH CHECKOUT: a checkout an earlier run left half-made.
fetch_into() {
	local dir=$1 url=$2 branch=$3
	if git -C "$dir" remote get-url origin >/dev/null 2>&1; then
		git -C "$dir" remote set-url -- origin "$url"
	else
		git -C "$dir" remote add -- origin "$url"
	fi
	git -C "$dir" fetch -q origin >&2 || die "fetching $url into $4 failed"
	if [ -z "$branch" ]; then
		branch=$(git -C "$dir" ls-remote --symref origin HEAD |
			sed -n 's|^ref: refs/heads/\(.*\)[[:space:]]HEAD$|\1|p')
		[ -n "$branch" ] || die "$url has no default branch; set the repo's branch"
		check_branch "$branch" # the remote chose this one
	fi
	git -C "$dir" checkout -q -B "$branch" --track "origin/$branch" -- >&2 ||
		die "checking out $branch in $4 failed"
	git -C "$dir" remote set-head -- origin "$branch" >&2
}

kind=""
while read_field kind; do
	[ "$kind" = repo ] || break
	read_field checkout && read_field url && read_field branch ||
		die "the payload from the host was truncated"
	home_path dir "$checkout"
	if [[ $url == -* || $url =~ ^[A-Za-z0-9+.-]*:: || $url == *[[:cntrl:][:space:]]* ]]; then
		die "refusing the URL for $checkout: an option, a transport::address or a control character"
	fi
	[ -z "$branch" ] || check_branch "$branch"

	if [ -e "$dir/.git" ] && git -C "$dir" rev-parse -q --verify HEAD >/dev/null 2>&1; then
		current=$(git -C "$dir" remote get-url origin 2>/dev/null || true)
		if [ "$current" != "$url" ]; then
			if [ -n "$current" ]; then git -C "$dir" remote set-url -- origin "$url"; else git -C "$dir" remote add -- origin "$url"; fi
			changed "repo $checkout origin"
		fi
		continue
	fi

	if [ ! -e "$dir/.git" ] && [ ! -L "$dir/.git" ]; then
		clone_new "$dir" "$url" "$branch" "$checkout"
	else
		fetch_into "$dir" "$url" "$branch" "$checkout"
	fi
	changed "repo $checkout cloned"
	# Scopes made before this checkout existed: keep their .envrc out of git.
	if [ -f "$HOME/.config/sand/scopes" ]; then
		while IFS= read -r scope; do
			case $scope in "$dir" | "$dir"/*) [ ! -f "$scope/.envrc" ] || exclude_envrc "$scope" ;; esac
		done <"$HOME/.config/sand/scopes"
	fi
done
expect_end "$kind"
