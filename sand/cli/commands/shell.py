"""``sand shell VM [-- CMD]``: the VM's tmux session attached, or one command run."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sand import activity
from sand.cli.guests import UsageError, pinned_endpoint, run_ssh, say
from sand.cli.waits import shown_while_waiting
from sand.guest.stream import run_streaming
from sand.verbs.shell import tmux_command
from sand.verbs.target import connect, resolve


def run(args: argparse.Namespace) -> int:
    raw = bool(getattr(args, "raw", False))
    new = bool(getattr(args, "new", False))
    command = list(args.guest_command)
    if command and command[0] in ("--new", "--raw"):
        # argparse hands everything after VM to the command; no guest program is
        # called --new, so this is the option written in the wrong place.
        raise UsageError(f"put {command[0]} before the VM: sand shell {command[0]} VM")
    if command:
        if new:
            raise UsageError("--new is for the interactive shell; -- CMD runs without tmux")
        with shown_while_waiting(args.vm):
            return asyncio.run(_shell_command(args.manifest, args.vm, command, raw))
    if raw:
        raise UsageError(
            "--raw is for a command (sand shell --raw VM -- CMD); an interactive shell is "
            "your terminal talking to the guest's, byte for byte"
        )

    with shown_while_waiting(args.vm):
        endpoint = asyncio.run(pinned_endpoint(args.manifest, args.vm))
    # The guest's tmux session is what survives a dropped connection; ssh asks for a
    # terminal for it only when there is one here (else the guest gives a plain shell).
    return run_ssh(endpoint, command=tmux_command(args.vm, new=new), tty=sys.stdin.isatty())


async def _shell_command(manifest: str, vm: str, argv: list[str], raw: bool) -> int:

    async with resolve(manifest, vm, say) as target, connect(target.endpoint) as conn:
        activity.reached()
        return await run_streaming(conn, argv, raw=raw)
