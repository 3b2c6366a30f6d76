#!/bin/bash
# Step "memory" (root): the kernel zeroes memory as it frees it (init_on_free=1), so
# the copies of a secret that a finished step leaves in freed pages (its pipe, its
# shell, a removed tmpfs file) are gone before a hibernation or a memory snapshot
# saves the guest's RAM (sand/provision/memory.py). Put on the kernel command line
# through grub's drop-in directory: it takes effect at the next boot. A guest that
# boots without grub (a container, a kernel booted directly) is left as it is: the
# scrub before a save says its freed memory is not zeroed.
# argv: none. stdin: unused.
. "$(dirname -- "$0")/lib.sh"

command -v update-grub >/dev/null 2>&1 || exit 0
conf=/etc/default/grub.d/60-sand-memory.cfg
mkdir -p -- "$(dirname -- "$conf")"
# Sourced after the image's own drop-ins (Ubuntu's 50-cloudimg-settings.cfg sets the
# variable outright): appended to whatever they left.
if put_file "$conf" 644 <<<'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT init_on_free=1"'; then
	update-grub >&2
	changed "$conf: init_on_free=1 from the next boot"
fi
