"""``sand doctor``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, add_manifest_args


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "doctor",
        help="check backend credentials and permissions",
        description="Contact each backend the manifest names and check what sand needs "
        "there: reachable, credentials accepted, privileges, storage, templates, tools. "
        "One line per problem, naming its backend; `ok` for a backend with none.",
        epilog="examples:\n  sand doctor\n  sand doctor -f fleet.yaml --json",
    )
    add_manifest_args(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="a JSON object on stdout: per backend, ok or not and its problems",
    )
