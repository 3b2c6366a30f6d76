"""``sand validate``'s flags."""

from __future__ import annotations

from sand.cli.completion import complete_files
from sand.cli.flags import Subcommands


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "validate",
        help="check manifests without contacting any backend",
        description="Check each manifest (several, or - for stdin) as plan would read it, "
        "without contacting a backend: every problem with its FILE:LINE:COL. Exit 1 when "
        "any is invalid.",
        epilog="examples:\n  sand validate\n  sand validate manifests/*.yaml --json\n"
        "  git show HEAD:sand.yaml | sand validate -",
    )
    manifests = p.add_argument(
        "manifests",
        nargs="*",
        metavar="MANIFEST",
        help="the manifests to check; - reads one from stdin (default: ./sand.yaml)",
    )
    flag = p.add_argument(
        "-f",
        "--file",
        "--manifest",
        dest="manifest_files",
        action="append",
        default=[],
        metavar="MANIFEST",
        help="a manifest to check (repeatable), as with the other commands",
    )
    complete_files(manifests, flag)
    p.add_argument(
        "--json",
        action="store_true",
        help="a JSON list on stdout: per file, valid or not and its problems (file, "
        "line, column, message)",
    )
