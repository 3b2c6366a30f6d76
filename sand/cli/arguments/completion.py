"""``sand completion``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for bash, zsh or fish: subcommands, flags, "
        "file names, and the VM names of the manifest being completed (read locally, no "
        "backend contacted).",
        epilog="examples:\n  source <(sand completion bash)\n"
        '  sand completion zsh > "${fpath[1]}/_sand"',
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete for")
