"""``sand template``'s flags (its one action, ``build``)."""

from __future__ import annotations

from sand.cli.flags import Subcommands, add_manifest_args


def add(sub: Subcommands) -> None:
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
        epilog="examples:\n  sand template build\n"
        "  sand template build --backend pve --name debian-13 --checksum sha512:<hex>",
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
