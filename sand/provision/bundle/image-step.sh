#!/bin/bash
# Step "image-<NAME>" (root): one of a golden image's own steps, as the manifest
# writes it under `images: NAME: steps:`. Only a base runs it, once per change of
# the image; every VM made from the base has its result.
# argv: NAME (validated by the host). stdin: the step's shell text, run by bash
# with errexit and pipefail, as root, in /root, with DEBIAN_FRONTEND=noninteractive
# and umask 022: what it installs is readable by everyone, as from a root shell (lib's
# umask 077 is for sand's own files; install scripts rarely set modes themselves).
# Its output is shown only when it fails.
. "$(dirname -- "$0")/lib.sh"
name=$1
[[ $name =~ ^[a-z][a-z0-9-]{0,39}$ ]] || die "not an image step name: $name"

text=$(mktemp)
_sand_tmp+=("$text")
cat >"$text"
[ -s "$text" ] || die "image step $name has no text"
cd /root
(umask 022 && DEBIAN_FRONTEND=noninteractive bash -e -o pipefail -- "$text") >&2 ||
	die "image step $name failed (exit $?)"
changed "image step $name"
