"""``sand ui``'s flags."""

from __future__ import annotations

from sand import defaults
from sand.cli.flags import INTERVAL, Subcommands, add_manifest_args


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "ui",
        help="a live board of the fleet: status, plan, apply, shell, land",
        description="A terminal board of the fleet, re-observed every --interval seconds: "
        "each VM's state and conditions; keys to plan, apply, open a shell or land work.",
        epilog="examples:\n  sand ui\n  sand ui -f fleet.yaml --interval 10 --watch",
    )
    add_manifest_args(p)
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.BOARD_INTERVAL,
        metavar="S",
        help="re-observe every S seconds, 0.5 to 86400 (one listing per backend; "
        f"default {defaults.BOARD_INTERVAL:g})",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="re-plan on every manifest save and show drift as it is found; drift is "
        "corrected only with selfHeal: true",
    )
