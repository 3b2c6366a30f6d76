"""``sand status``'s flags."""

from __future__ import annotations

from sand.cli.flags import GUEST_TIMEOUT, Subcommands, add_manifest_args


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "status",
        help="desired vs observed, per VM",
        description="One row per VM: desired and observed state, and the Synced, Healthy "
        "and Provisioned conditions; the project's leases. Read-only; exit 1 when a "
        "backend could not be observed.",
        epilog="examples:\n  sand status\n  sand status --deep --timeout 60\n"
        "  sand status --json | jq '.vms[].conditions'",
    )
    add_manifest_args(p)
    p.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also check each running guest over SSH (reachable, its agents installed, "
        "its secrets on tmpfs) for Healthy; without it no guest is contacted",
    )
    p.add_argument(
        "--timeout",
        type=GUEST_TIMEOUT,
        metavar="S",
        help="--deep: seconds each guest gets to answer, up to 3600 (default 45)",
    )
