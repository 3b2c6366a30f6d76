"""``sand schema``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands

OUTPUT_SCHEMAS = ("plan", "status", "apply", "doctor", "audit")


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "schema",
        help="print the manifest's JSON Schema (or an output's, with --output)",
        description="Print the JSON Schema of the manifest, for an editor "
        "(yaml-language-server) or a validator; with --output, the schema of a command's "
        "JSON output instead. Each is the file shipped in the package.",
        epilog="examples:\n  sand schema > sand.schema.json\n  sand schema --output plan",
    )
    p.add_argument(
        "--output",
        choices=OUTPUT_SCHEMAS,
        help="the schema of `sand plan --json`, `sand status --json`, the lines of "
        "`sand apply --json`, `sand doctor --json` or `sand audit log --json`",
    )
