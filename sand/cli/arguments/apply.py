"""``sand apply``'s flags (``--watch`` among them)."""

from __future__ import annotations

from sand import defaults
from sand.cli.flags import (
    DEBOUNCE,
    INTERVAL,
    LEASE_WAIT,
    Subcommands,
    add_apply_flags,
    add_approve_flag,
    add_data_loss_flag,
    add_manifest_args,
    add_steering_flags,
)


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "apply",
        help="make the VMs match the manifest",
        description="Plan, ask, then create, change, replace and delete VMs until they "
        "match the manifest, and provision their guests; a saved plan (plan --out) runs "
        "only while nothing changed. With --watch: again on every save of the manifest.",
        epilog="examples:\n  sand apply\n  sand apply fleet.yaml --auto-approve --parallelism 8\n"
        "  sand apply --watch",
    )
    add_manifest_args(p, plan_file=True)
    add_approve_flag(p)
    p.add_argument("--json", action="store_true", help="plan and results as JSON on stdout")
    add_apply_flags(p)
    add_data_loss_flag(p)
    add_steering_flags(p)
    p.add_argument(
        "--lease-wait",
        type=LEASE_WAIT,
        default=0.0,
        metavar="S",
        help="wait up to S seconds while another applier holds the project's lease "
        "(default 0: fail at once, naming it)",
    )
    p.add_argument("--watch", action="store_true", help="re-apply on every manifest save")
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.INTERVAL,
        metavar="S",
        help=f"watch: re-observe every S seconds, 0.5 to 86400 (default {defaults.INTERVAL:g})",
    )
    p.add_argument(
        "--debounce",
        type=DEBOUNCE,
        default=defaults.DEBOUNCE,
        metavar="S",
        help="watch: seconds a save settles before the re-plan, 0 to 60 "
        f"(default {defaults.DEBOUNCE:g})",
    )
