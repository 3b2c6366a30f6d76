#!/bin/bash
# Step "agents" (root): install the coding agents the VM lists, remove those it
# no longer lists. No agent credential is ever installed: you log in inside
# the VM yourself.
# argv: USER SOURCE AGENT...  SOURCE is "registry" (npm, which the toolchain
#   step installed; else the vendor's installer, for the agents that have one)
#   or "upload" (stdin is a tar of stand-in executables named after the agents,
#   from SAND_AGENT_SOURCE on the host).
. "$(dirname -- "$0")/lib.sh"
user=$1 source=$2
shift 2
records=/var/lib/sand/agents
mkdir -p -m 755 "$records"
home=$(home_of "$user")

declare -A npm_package=(
	[claude]=@anthropic-ai/claude-code
	[codex]=@openai/codex
	[opencode]=@opencode/cli
	[pi]=@earendil-works/pi-coding-agent
)
declare -A installer=([claude]=https://claude.ai/install.sh [codex]=https://chatgpt.com/codex/install.sh)
declare -A wanted=()
for agent in "$@"; do wanted[$agent]=1; done

as_user() { sudo -n -H -u "$user" -- "$@"; }

found() {  # found AGENT: is it on the user's PATH (system or ~/.local/bin)?
	[ -x "/usr/local/bin/$1" ] || [ -x "/usr/bin/$1" ] || [ -x "$home/.local/bin/$1" ]
}

upload_dir=""
if [ "$source" = upload ]; then
	upload_dir=$(mktemp -d)
	trap 'rm -rf -- "$upload_dir"; rm -f -- "${_sand_tmp[@]}"' EXIT
	tar -x -f - -C "$upload_dir" --no-same-owner --no-same-permissions
fi

for agent in "$@"; do
	case $source in
	upload)
		[ -f "$upload_dir/$agent" ] || die "no stand-in for $agent was uploaded"
		if put_copy "$upload_dir/$agent" "/usr/local/bin/$agent" 755; then
			changed "agent $agent (uploaded)"
		fi
		put_file "$records/$agent" 644 <<<upload || true
		;;
	registry)
		if found "$agent"; then continue; fi
		if command -v npm >/dev/null 2>&1; then
			npm install -g --no-fund --no-audit -- "${npm_package[$agent]}" >&2 ||
				die "npm install -g ${npm_package[$agent]} failed"
			put_file "$records/$agent" 644 <<<npm || true
		else
			# The vendor's installer puts the agent in ~/.local/bin for the user.
			[ -n "${installer[$agent]:-}" ] || die "npm is not available to install $agent"
			command -v curl >/dev/null 2>&1 || die "neither npm nor curl is available to install $agent"
			as_user bash -c 'set -o pipefail; curl -fsSL "$1" | bash' sand-install "${installer[$agent]}" >&2 ||
				die "the $agent installer (${installer[$agent]}) failed"
			put_file "$records/$agent" 644 <<<installer || true
		fi
		found "$agent" || die "$agent was installed but is not on the user's PATH"
		changed "agent $agent"
		;;
	*) die "unknown agent source $source" ;;
	esac
done

# Agents sand installed earlier that the VM no longer lists.
for record in "$records"/*; do
	[ -f "$record" ] || continue
	agent=${record##*/}
	[ -n "${wanted[$agent]:-}" ] && continue
	case $(cat -- "$record") in
	upload) rm -f -- "/usr/local/bin/$agent" ;;
	npm) npm uninstall -g -- "${npm_package[$agent]}" >&2 || true ;;
	installer) rm -f -- "$home/.local/bin/$agent" ;;
	esac
	rm -f -- "$record"
	changed "agent $agent removed"
done
