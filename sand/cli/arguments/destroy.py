"""``sand destroy``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, add_approve_flag, add_data_loss_flag, add_manifest_args


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "destroy",
        help="delete every VM this manifest's project manages",
        description="Delete every VM the project manages, after the same confirmation as "
        "apply; protected VMs and VMs holding unpushed work are kept and named.",
        epilog="examples:\n  sand destroy\n  sand destroy fleet.yaml --auto-approve",
    )
    add_manifest_args(p)
    add_approve_flag(p)
    add_data_loss_flag(p)
