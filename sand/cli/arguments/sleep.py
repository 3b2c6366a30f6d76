"""``sand sleep``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, manifest_option, vm_argument


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "sleep",
        help="put a running VM to sleep now, as its idle policy would",
        description="Hibernate the VM (Proxmox: suspend to disk; memory, processes and "
        "tmux sessions kept) or, where the backend cannot (Lima) or with --stop, stop it "
        "(running processes and tmux sessions end; files and the agents' conversations "
        "stay on disk). It stays asleep, shown Synced (asleep), until sand wake or a use "
        "of it wakes it; an apply leaves it asleep unless it must change it.",
        epilog="examples:\n  sand sleep agent-1\n  sand sleep agent-1 --stop\n"
        "  sand sleep agent-1 --force",
    )
    manifest_option(p)
    vm_argument(p, "the VM to put to sleep")
    p.add_argument(
        "--stop", action="store_true", help="stop it even where the backend could hibernate it"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="put it to sleep even while an agent works or a person is attached (otherwise "
        "refused, naming them)",
    )
