#!/bin/bash
# Step "item" (as the user): the work item a generator made this VM for (a GitHub
# issue or pull request: its key, number, title, body and URL), as ~/.sand/item.json
# for the VM's agent to read (docs/generators.md).
# argv: none. stdin: NUL-terminated records "item JSON", then "end".
#
# The text is anyone's who could open the issue: it arrives on stdin (never argv),
# is written byte for byte as data (0600, through a temp file, renamed), and is never
# run, sourced or parsed here.
. "$(dirname -- "$0")/lib.sh"

kind="" text="" end=""
read_field kind && [ "$kind" = item ] && read_field text ||
	die "the payload from the host was truncated"
read_field end || true
expect_end "$end"
home_path dir "~/.sand"
[ -L "$dir" ] && die "~/.sand is a symbolic link: refusing to write through it"
mkdir -p -m 700 -- "$dir"
if printf '%s' "$text" | put_file "$dir/item.json" 600; then
	changed "work item file"
fi
