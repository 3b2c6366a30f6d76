"""``sand reset``'s flags."""

from __future__ import annotations

from sand.cli.flags import (
    Subcommands,
    add_approve_flag,
    add_data_loss_flag,
    manifest_option,
    vm_argument,
)


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "reset",
        help="replace a VM from its image, keeping its preserve: paths",
        description="Replace one VM from its image, carrying its preserve: paths over: "
        "the same run as `sand apply --replace VM --target VM` (same prompt, same guards).",
        epilog="example:\n  sand reset agent-1",
    )
    vm_argument(p, "the VM to replace")
    manifest_option(p)
    add_approve_flag(p)
    add_data_loss_flag(p)
