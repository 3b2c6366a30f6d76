#!/bin/bash
# Step "home" (as the user): shell setup and agent settings in the user's home.
# argv: AGENT... (the agents the VM lists). stdin: unused.
. "$(dirname -- "$0")/lib.sh"
files=$SAND_LIB/files
declare -A wanted=()
for agent in "$@"; do wanted[$agent]=1; done

# Interactive shells: direnv's hook (scoped secrets follow the working
# directory), ~/.local/bin on PATH, and Claude Code without permission prompts.
block=$(
	printf '%s\n' '# Managed by sand; edits inside this block are overwritten.'
	printf '%s\n' 'export IS_SANDBOX=1'
	printf '%s\n' 'case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$HOME/.local/bin:$PATH" ;; esac'
	if [ -n "${wanted[claude]:-}" ]; then
		printf '%s\n' "alias claude='claude --dangerously-skip-permissions'"
	fi
	printf '%s\n' 'if command -v direnv >/dev/null 2>&1; then eval "$(direnv hook bash)"; fi'
)
if put_block "$HOME/.bashrc" sand <<<"$block"; then changed "$HOME/.bashrc"; fi

# sand owns these files whole: a provision puts them back as the bundle has them.
# agent_file AGENT SOURCE DEST: present when AGENT is listed, gone otherwise
# (but only a copy that is still ours: never a file the user wrote).
agent_file() {
	local agent=$1 src=$2 dest=$3
	if [ -n "${wanted[$agent]:-}" ]; then
		mkdir -p -- "$(dirname -- "$dest")"
		if put_copy "$src" "$dest" 600; then changed "$dest"; fi
	elif [ -f "$dest" ] && cmp -s -- "$src" "$dest"; then
		rm -f -- "$dest"
		changed "$dest removed"
	fi
}
agent_file claude "$files/claude-settings.json" "$HOME/.claude/settings.json"
agent_file codex "$files/codex-config.toml" "$HOME/.codex/config.toml"
agent_file opencode "$files/opencode.json" "$HOME/.config/opencode/opencode.json"
agent_file pi "$files/pi-settings.json" "$HOME/.pi/agent/settings.json"
# Each agent reports its sessions' state to the bundle's agent-state hook (docs/agents.md):
# Claude's and Codex's through the files above, OpenCode and Pi through these.
agent_file opencode "$files/opencode-sand-state.js" "$HOME/.config/opencode/plugin/sand-state.js"
agent_file pi "$files/pi-sand-state.ts" "$HOME/.pi/agent/extensions/sand-state.ts"

# Skip Claude Code's first-run wizard (upstream issue #73). This is Claude's
# own state file (your login lands here too), so it is only ever created.
if [ -n "${wanted[claude]:-}" ] && [ ! -e "$HOME/.claude.json" ]; then
	printf '{"hasCompletedOnboarding": true}\n' >"$HOME/.claude.json"
	changed "$HOME/.claude.json"
fi
