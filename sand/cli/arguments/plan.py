"""``sand plan``'s flags."""

from __future__ import annotations

from sand.cli.completion import complete_files
from sand.cli.flags import Subcommands, add_data_loss_flag, add_manifest_args, add_steering_flags


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "plan",
        help="show what apply would do",
        description="Observe the backends (read-only) and print what apply would change, "
        "in Terraform's symbols (+ create, ~ change, -/+ replace, - destroy, ! blocked). "
        "Exit 1 when a backend is unknown or a change is blocked; with "
        "--detailed-exitcode, 2 when changes are pending.",
        epilog="examples:\n  sand plan\n  sand plan --target agent-1 --json\n"
        "  sand plan --out tonight.plan && sand apply tonight.plan",
    )
    add_manifest_args(p)
    p.add_argument("--json", action="store_true", help="the plan as JSON on stdout")
    p.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when changes pend")
    p.add_argument("--refresh-only", action="store_true", help="report drift, propose nothing")
    out = p.add_argument(
        "--out", metavar="FILE", help="save the plan for a later 'sand apply FILE'"
    )
    complete_files(out)
    add_data_loss_flag(p)
    add_steering_flags(p)
