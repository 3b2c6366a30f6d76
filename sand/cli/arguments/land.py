"""``sand land``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, manifest_option, vm_argument


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "land",
        help="list a VM's git checkouts with push/PR state; open a draft PR with your gh",
        description="List the VM's git checkouts (a read-only sweep): branch, commits on "
        "no remote, dirty files, and each branch's pull request. --pr opens a draft PR for "
        "a pushed branch with the host's gh; --web prints (and opens) the compare URL. "
        "Only PR metadata reaches the host.",
        epilog="examples:\n  sand land agent-1\n  sand land agent-1 ~/app --pr\n"
        "  sand land --compare 'try-*'",
    )
    manifest_option(p)
    vm_argument(p, "the VM whose checkouts to list")
    p.add_argument("path", nargs="?", metavar="PATH", help="the checkout --pr/--web act on")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--pr", action="store_true", help="open a draft PR with the host's gh")
    mode.add_argument("--web", action="store_true", help="print (and open) the compare URL")
    mode.add_argument(
        "--compare",
        action="store_true",
        help="VM (and PATH) are patterns (try-*): the forks they name side by side: each "
        "checkout's branch, commits and changes since the fork point, and agent state",
    )
