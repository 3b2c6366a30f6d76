"""``sand cp``'s flags."""

from __future__ import annotations

from sand.cli.completion import VM_PATHS
from sand.cli.flags import Subcommands, manifest_option


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "cp",
        help="copy files between the host and a VM (the only way files cross)",
        usage="sand cp [-f FILE] [-r] SRC DST   (one of SRC, DST is VM:PATH)",
        description="Like cp -r: into DST when it is an existing directory, else as DST. "
        "Downloads never replace a host file and never follow guest symlinks.",
        epilog="examples:\n  sand cp notes.md agent-1:~/app/\n"
        "  sand cp -r agent-1:~/app/dist ./dist",
    )
    manifest_option(p)
    p.add_argument("-r", "--recursive", action="store_true", help="copy directories")
    src = p.add_argument("src", metavar="SRC", help="a host path, or VM:PATH in a VM")
    dst = p.add_argument("dst", metavar="DST", help="a host path, or VM:PATH in a VM")
    for side in (src, dst):
        side.complete = VM_PATHS  # read by shtab
