"""``sand publish``'s flags."""

from __future__ import annotations

from sand.cli.flags import Subcommands, manifest_option, vm_argument


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "publish",
        help="publish a VM checkout's commits to a drupal.org issue fork as a merge request",
        description="Replay a VM checkout's commits onto the drupal.org issue fork's "
        "branch and open a merge request, decided on the host: what would be pushed is "
        "shown first and sent only with your yes (or --yes).",
        epilog="example:\n  sand publish agent-1 --issue https://www.drupal.org/project/x/issues/123",
    )
    manifest_option(p)
    vm_argument(p, "the VM holding the checkout")
    p.add_argument("path", nargs="?", metavar="PATH", help="the checkout (default: the VM's repo)")
    p.add_argument("--issue", required=True, metavar="URL", help="the drupal.org issue's URL")
    p.add_argument("--branch", metavar="NAME", help="fork branch (default: NID-issue-title)")
    p.add_argument("--target-branch", metavar="NAME", help="default: the project's default")
    p.add_argument("--yes", action="store_true", help="publish without asking (after showing)")
