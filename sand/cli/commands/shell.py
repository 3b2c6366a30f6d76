"""``sand shell VM [-- CMD]``: the VM's tmux session attached, or one command run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from sand import activity
from sand.audit.trail import record
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
    with audited_session(args.vm, args.manifest, "tmux", endpoint.host) as closing:
        closing["exit"] = run_ssh(
            endpoint, command=tmux_command(args.vm, new=new), tty=sys.stdin.isatty()
        )
    return int(closing["exit"])


@contextlib.contextmanager
def audited_session(vm: str, manifest: str, mode: str, host: str) -> Iterator[dict[str, Any]]:
    """``shell.opened`` now, ``shell.closed`` (with the exit status the body sets, or the
    error) however the session ends. Never the command line: a person may type a token."""
    opened = record("shell.opened", vm=vm, manifest=manifest, mode=mode, target=host)
    closing: dict[str, Any] = {"exit": None}
    try:
        yield closing
    except BaseException as exc:
        closing["error"] = type(exc).__name__
        raise
    finally:
        record("shell.closed", vm=vm, manifest=manifest, opened=opened, **closing)


async def _shell_command(manifest: str, vm: str, argv: list[str], raw: bool) -> int:

    async with resolve(manifest, vm, say) as target, connect(target.endpoint) as conn:
        activity.reached()
        with audited_session(vm, manifest, "command", target.endpoint.host) as closing:
            closing["exit"] = await run_streaming(conn, argv, raw=raw)
        return int(closing["exit"])
