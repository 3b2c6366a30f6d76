"""``sand land VM`` (a guest's checkouts swept) and ``sand land --compare`` (forks side by side)."""

from __future__ import annotations

import argparse
import asyncio

from sand.cli.guests import compare_vms, land_vm
from sand.cli.waits import shown_while_waiting


def run(args: argparse.Namespace) -> int:
    with shown_while_waiting(args.vm):
        return asyncio.run(_land(args))


async def _land(args: argparse.Namespace) -> int:
    if args.compare:
        patterns = [args.vm, *([args.path] if args.path else [])]
        return await compare_vms(args.manifest, patterns)
    return await land_vm(args.manifest, args.vm, path=args.path, open_pr=args.pr, web=args.web)
