"""``sand shell``'s flags."""

from __future__ import annotations

import argparse

from sand.cli.flags import Subcommands, manifest_option, vm_argument


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "shell",
        help="a shell (or one command) in a VM, as its user",
        usage="sand shell [-f FILE] [--new] [--raw] VM [-- CMD...]",
        description="Without a command: attach the VM's persistent tmux session (named "
        "after the VM; created when missing), so what runs there survives a dropped "
        "connection. With -- CMD: run CMD alone, without tmux, and exit with its status.",
        epilog="examples:\n  sand shell agent-1\n  sand shell agent-1 -- git -C ~/app status",
    )
    manifest_option(p)
    p.add_argument(
        "--new",
        action="store_true",
        help="start a new tmux session (VM-2, VM-3, ...) instead of attaching the VM's",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="pass the command's output through byte for byte (binary pipelines); by "
        "default terminal control sequences are removed from it",
    )
    vm_argument(p, "the VM to open a shell in")
    # Not "command": that name holds the verb on the namespace (the parser's
    # subcommand dest), which sand's logs and its plan/validate switches read.
    command = p.add_argument(
        "guest_command",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="optional, after --: run this alone (no tmux) and exit with its status",
    )
    command.required = False  # argparse counts a REMAINDER as required: "required: VM, CMD"
