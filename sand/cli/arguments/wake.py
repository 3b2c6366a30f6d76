"""``sand wake``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, manifest_option, vm_argument


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "wake",
        help="wake a VM that sleeps (idle, or sand sleep): resume or start it",
        description="Resume a VM hibernated for idle (Proxmox) or start one stopped for "
        "idle or by sand sleep (Lima, or --stop). sand shell, cp and land, the board's "
        "keys and an apply that must provision wake a sleeping VM by themselves; this is "
        "for waking it ahead of use.",
        epilog="example:\n  sand wake agent-1",
    )
    manifest_option(p)
    vm_argument(p, "the VM to wake")
