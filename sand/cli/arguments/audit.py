"""``sand audit``'s flags: ``log``, ``verify`` and ``checkpoint``."""

from __future__ import annotations

import argparse

from sand.cli.flags import Subcommands

DEFAULT_REF = "refs/sand/audit/<this host's name>"


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "audit",
        help="read and verify the host's audit trail of what sand did",
        description="Every change apply made, secret delivered (its name and a keyed digest, "
        "never the value), shell session, file copied, landing, publish, fork, claim, sleep, "
        "wake and lease, on this host, hash-chained and signed with a host key "
        "(docs/audit.md).",
        epilog="examples:\n  sand audit log --vm agent-1 --since 2h\n  sand audit verify\n"
        "  sand audit checkpoint --export git@git.example.com:ops/audit.git",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(
        dest="audit_action", metavar="ACTION", required=True, help="what to do with it"
    )
    _log(actions)
    _verify(actions)
    _checkpoint(actions)


def _log(actions: Subcommands) -> None:
    log = actions.add_parser(
        "log",
        help="print the records, oldest first",
        description="Print the audit records, oldest first; a line that is no record is "
        "left out (sand audit verify names it).",
        epilog="examples:\n  sand audit log --vm agent-1 --since 2h\n"
        "  sand audit log --since 2026-12-06T09:00Z --json",
    )
    log.add_argument("--vm", metavar="VM", help="only the records of this VM")
    log.add_argument(
        "--since", metavar="T", help="only records from T on: a time (ISO 8601, UTC) or 30m, 2h, 7d"
    )
    log.add_argument(
        "--json", action="store_true", help="one JSON document (sand schema --output audit)"
    )


def _verify(actions: Subcommands) -> None:
    verify = actions.add_parser(
        "verify",
        help="check the chain, the signatures and the checkpoints; name the first bad record",
        description="Walk the log: each record must follow the one before it (its seq and "
        "the hash it holds), each checkpoint must be signed by the pinned key, and each "
        "checkpoint kept beside the log or exported to --against must name a record the "
        "log still holds. Exit 1 naming the first record it no longer vouches for; a "
        "record torn by a killed writer is reported, not failed.",
        epilog="examples:\n  sand audit verify\n"
        "  sand audit verify --against git@git.example.com:ops/audit.git --key audit.pub",
    )
    _export_flags(verify, "--against", "a repository holding exported checkpoints (repeatable)")
    verify.add_argument(
        "--key",
        metavar="FILE",
        help="the public key to pin (default: the host's signing.pub, which an export's "
        "first checkpoint must match)",
    )


def _checkpoint(actions: Subcommands) -> None:
    checkpoint = actions.add_parser(
        "checkpoint",
        help="sign the log as it stands now; with --export, push it to a git ref",
        description="Append a checkpoint signed with the host key (fsync-ed, kept in "
        "head.json); with --export, add it as a commit on a ref of another repository, "
        "where the host's user alone cannot take it back (a protected ref, a server that "
        "refuses forced pushes).",
        epilog="examples:\n  sand audit checkpoint\n"
        "  sand audit checkpoint --export git@git.example.com:ops/audit.git",
    )
    _export_flags(checkpoint, "--export", "the repository to push the checkpoint to")
    checkpoint.add_argument(
        "--syslog",
        metavar="HOST:PORT",
        action="append",
        default=[],
        help="also send it to this syslog collector (UDP, RFC 5424; repeatable)",
    )


def _export_flags(p: argparse.ArgumentParser, flag: str, words: str) -> None:
    p.add_argument(flag, metavar="REPO", action="append", default=[], help=words)
    p.add_argument("--ref", metavar="REF", help=f"the ref there (default: {DEFAULT_REF})")
