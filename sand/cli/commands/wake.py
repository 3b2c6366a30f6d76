"""``sand wake VM``: a VM asleep (idle, or ``sand sleep``) resumed or started."""

from __future__ import annotations

import argparse
import asyncio

from sand.cli.guests import say
from sand.cli.waits import shown_while_waiting
from sand.project import open_session
from sand.verbs.power import asleep, find_vm, wake_if_asleep


def run(args: argparse.Namespace) -> int:
    with shown_while_waiting(args.vm):
        print(asyncio.run(_wake(args.manifest, args.vm)))
    return 0


async def _wake(manifest: str, name: str) -> str:
    session = open_session(manifest, lock=False)
    try:
        vm, current = await find_vm(session, manifest, name)
        if asleep(session, current) is None:
            return f"{name} is not asleep ({current.power}): nothing to wake"
        await wake_if_asleep(session, vm, current, say)
        return f"{name} is awake"
    finally:
        await session.close()
