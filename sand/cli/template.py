"""``sand template build``: make the template a backend clones from, from a cloud image.

Only a backend that can build one offers ``build_template`` (Proxmox); the command asks
the backend, never its type. Building the parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
from typing import Any

from sand.cli.exits import EXIT_OK
from sand.cli.flags import add_manifest_args


def add_template_parser(sub: Any) -> None:
    """Register ``sand template build`` on the main parser's subparsers."""
    p = sub.add_parser(
        "template",
        help="build the template a Proxmox backend clones from",
        description="Templates a backend clones VMs from; `sand template build` makes one.",
    )
    actions = p.add_subparsers(
        dest="template_action", metavar="ACTION", required=True, help="what to do with it"
    )
    b = actions.add_parser(
        "build",
        help="import a cloud image and make it a template in the backend's pool (once)",
        description="Has PVE download a cloud image onto the image storage (content "
        "'import'), creates a VM in the backend's pool from it with the guest agent, a "
        "serial console and a cloud-init drive, and converts it to a template carrying "
        "sand's marker. A second run finds it and does nothing; a token lacking a "
        "privilege is refused, naming it, before anything is made.",
    )
    add_manifest_args(b)
    b.add_argument("--backend", metavar="NAME", help="default: the only backend that can")
    b.add_argument("--name", metavar="NAME", help="the template's name (default: the backend's)")
    b.add_argument(
        "--url", metavar="URL", help="the cloud image (default: Debian 13 genericcloud amd64)"
    )
    b.add_argument(
        "--checksum",
        metavar="ALGO:HEX",
        help="what PVE verifies the download against, e.g. sha512:<hex> from SHA512SUMS",
    )
    b.add_argument(
        "--image-storage", metavar="STORAGE", help="file storage for the image (default: local)"
    )
    b.add_argument("--node", metavar="NODE", help="default: the backend's (first) node")
    b.set_defaults(handler=cmd_template_build)


def cmd_template_build(args: argparse.Namespace) -> int:
    # here, not at the top: sand --help starts without it
    import asyncio

    # here, not at the top: every command's parser imports this module, --version too
    from sand.errors import SandError

    # here, not at the top: importing it loads pydantic and yaml
    from sand.project import open_session

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
