#!/bin/bash
# Step "repos" (as the user): clone each repo into its checkout path, once.
# argv: none. stdin: NUL-terminated records "CHECKOUT URL BRANCH" (BRANCH may
# be empty: the remote's default), then "end".
#
# A checkout is made with init + fetch + checkout rather than `git clone` so
# that git reads the checkout's includeIf config (its credential helper, set up
# by the "secrets" step) from the first request on: the token is never in the
# URL, in .git/config or in argv. An existing checkout is left alone (it is the
# agent's work); only its origin URL is kept as declared.
#
# The host validated every field; they are checked again here (a URL that is
# an option or a "transport::" address, a branch that is not one, a path that
# leaves the home directory), every git argv puts "--" before its operands,
# and GIT_ALLOW_PROTOCOL keeps git to the transports a manifest may name (no
# ext::, which runs a command).
. "$(dirname -- "$0")/lib.sh"
export GIT_TERMINAL_PROMPT=0 GCM_INTERACTIVE=never GIT_ALLOW_PROTOCOL=file:git:http:https:ssh
umask 022 # a checkout is ordinary files, not secrets

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

	# New, or a checkout an earlier run left half-made (no commit checked out).
	mkdir -p -- "$dir"
	[ -e "$dir/.git" ] || git init -q -- "$dir" >&2
	if git -C "$dir" remote get-url origin >/dev/null 2>&1; then
		git -C "$dir" remote set-url -- origin "$url"
	else
		git -C "$dir" remote add -- origin "$url"
	fi
	git -C "$dir" fetch -q origin >&2 || die "fetching $url into $checkout failed"
	if [ -z "$branch" ]; then
		branch=$(git -C "$dir" ls-remote --symref origin HEAD |
			sed -n 's|^ref: refs/heads/\(.*\)[[:space:]]HEAD$|\1|p')
		[ -n "$branch" ] || die "$url has no default branch; set the repo's branch"
		check_branch "$branch" # the remote chose this one
	fi
	git -C "$dir" checkout -q -B "$branch" --track "origin/$branch" -- >&2 ||
		die "checking out $branch in $checkout failed"
	git -C "$dir" remote set-head -- origin "$branch" >&2
	changed "repo $checkout cloned"
	# Scopes made before this checkout existed: keep their .envrc out of git.
	if [ -f "$HOME/.config/sand/scopes" ]; then
		while IFS= read -r scope; do
			case $scope in "$dir" | "$dir"/*) [ ! -f "$scope/.envrc" ] || exclude_envrc "$scope" ;; esac
		done <"$HOME/.config/sand/scopes"
	fi
done
expect_end "$kind"
