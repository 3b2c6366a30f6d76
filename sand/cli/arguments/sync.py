"""``sand sync``'s flags."""

from __future__ import annotations

from sand import defaults
from sand.cli.completion import complete_files
from sand.cli.flags import INTERVAL, LEASE_WAIT, Subcommands, add_apply_flags


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "sync",
        help="apply the manifest in a git repository, each new commit once (GitOps)",
        description="Follow a branch of a git repository: fetch it every --interval "
        "seconds (or when a push webhook pokes --listen), apply each new commit's "
        "manifest once, keep the last good one in force when a commit's is invalid, and "
        "correct drift between commits only with selfHeal: true. The files the manifest "
        "names by a relative path come from --host-dir, never the repository; the manifest "
        "only names secrets, and --host-dir/secrets.yaml maps them to sources; "
        "--host-dir/pins.yaml says which addresses the host's credentials may be sent to.",
        epilog="examples:\n  sand sync --repo https://git.example.org/fleet.git --once\n"
        "  sand sync --repo ssh://git@git.example.org/fleet.git --branch main \\\n"
        "      --listen 127.0.0.1:8787 --webhook-secret-file /etc/sand/hook.secret",
    )
    p.add_argument("--repo", required=True, metavar="URL", help="https, ssh or file URL")
    p.add_argument("--branch", metavar="B", help="default: the repository's default branch")
    p.add_argument(
        "--path",
        default="sand.yaml",
        metavar="PATH",
        help="the manifest's path in the repository (default: sand.yaml)",
    )
    token = p.add_argument(
        "--token-file",
        metavar="F",
        help="a 0600 file holding an HTTPS token for the repository (never on argv)",
    )
    host_dir = p.add_argument(
        "--host-dir",
        metavar="DIR",
        help="where relative paths in the manifest (token_file, identity) are found, "
        "secrets.yaml, the map of secret names to sources, and pins.yaml, where the host's "
        "credentials may be sent (default: the current directory)",
    )
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.INTERVAL,
        metavar="S",
        help=f"fetch every S seconds, 0.5 to 86400 (default {defaults.INTERVAL:g})",
    )
    p.add_argument("--once", action="store_true", help="fetch and apply once, then exit (CI)")
    p.add_argument("--listen", metavar="ADDR", help="serve POST /hooks/git on HOST:PORT")
    secret = p.add_argument(
        "--webhook-secret-file", metavar="F", help="the 0600 file holding the webhook secret"
    )
    complete_files(token, host_dir, secret)
    p.add_argument("--metrics", metavar="ADDR", help="serve Prometheus /metrics on HOST:PORT")
    add_apply_flags(p)
    p.add_argument(
        "--lease-wait",
        type=LEASE_WAIT,
        default=defaults.UNATTENDED_LEASE_WAIT,
        metavar="S",
        help="seconds a run waits while another applier holds the project's lease "
        f"(default {defaults.UNATTENDED_LEASE_WAIT:g})",
    )
