"""``sand template build``: make the template a backend clones from, from a cloud image.

Only a backend that can build one offers ``build_template`` (Proxmox); the command asks
the backend, never its type."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from sand.cli.exits import EXIT_OK
from sand.errors import SandError
from sand.project import open_session


def run(args: argparse.Namespace) -> int:
    """``sand template build``, the one action."""

    session = open_session(args.manifest, lock=False)
    able = {n: b for n, b in session.backends.items() if hasattr(b, "build_template")}
    if args.backend is not None and args.backend not in session.backends:
        asyncio.run(session.close())
        raise SandError(f"no backend {args.backend!r} in the manifest")
    if args.backend is not None and args.backend not in able:
        asyncio.run(session.close())
        raise SandError(f"backend {args.backend!r} builds no templates (Proxmox backends do)")
    if args.backend is None and len(able) != 1:
        asyncio.run(session.close())
        if not able:
            raise SandError("no backend of this manifest builds templates (Proxmox backends do)")
        raise SandError("several backends build templates: choose one with --backend")
    name = args.backend or next(iter(able))

    async def run() -> Any:
        try:
            return await able[name].build_template(
                name=args.name,
                url=args.url,
                checksum=args.checksum,
                image_storage=args.image_storage,
                node=args.node,
            )
        finally:
            await session.close()

    result = asyncio.run(run())
    for line in result.lines():
        print(f"{name}: {line}")
    return EXIT_OK
