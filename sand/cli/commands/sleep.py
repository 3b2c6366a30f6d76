"""``sand sleep VM``: hibernated where the backend can (``--stop``: stopped)."""

from __future__ import annotations

import argparse
import asyncio

from sand.cli.guests import say
from sand.cli.waits import shown_while_waiting
from sand.project import open_session
from sand.verbs.power import find_vm, sleep_now


def run(args: argparse.Namespace) -> int:
    with shown_while_waiting(args.vm):
        print(asyncio.run(_sleep(args.manifest, args.vm, stop=args.stop, force=args.force)))
    return 0


async def _sleep(manifest: str, name: str, *, stop: bool, force: bool) -> str:
    session = open_session(manifest, lock=False)
    try:
        vm, current = await find_vm(session, manifest, name)
        how = await sleep_now(session, vm, current, stop=stop, force=force, note=say)
        return f"{name} is asleep ({how}); sand wake {name}, or any use of it, wakes it"
    finally:
        await session.close()
