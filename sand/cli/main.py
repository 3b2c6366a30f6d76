"""The ``sand`` command line. Exit codes: 0 ok / no changes, 1 error, 2 changes
pending (``--detailed-exitcode``). Heavy modules are imported inside the
command that needs them, so ``sand --version`` and ``sand validate`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from sand import __version__
from sand.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED
from sand.cli.template import add_template_parser
from sand.errors import ManifestError, SandError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sand",
        description="Keep disposable agent dev VMs in the state a manifest declares.",
    )
    parser.add_argument("--version", action="version", version=f"sand {__version__}")
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    parser.add_argument("--log-level", default="warning", help="debug, info, warning, error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def manifest_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("manifest", nargs="?", default="sand.yaml", help="default: ./sand.yaml")

    def data_loss_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--allow-data-loss",
            action="store_true",
            help="delete or replace VMs even when their checkouts hold unpushed work "
            "(or they cannot be swept); never implied by --watch",
        )

    def steering_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--target",
            action="append",
            default=[],
            metavar="VM",
            help="plan and apply only this VM (repeatable); the others are left as they are",
        )
        p.add_argument(
            "--replace",
            action="append",
            default=[],
            metavar="VM",
            help="replace this VM although nothing changed (repeatable); preserve: paths "
            "are carried over",
        )

    p = sub.add_parser("validate", help="check a manifest without contacting any backend")
    manifest_arg(p)
    sub.add_parser("schema", help="print the manifest's JSON Schema")

    p = sub.add_parser("plan", help="show what apply would do")
    manifest_arg(p)
    p.add_argument("--json", action="store_true", help="the plan as JSON on stdout")
    p.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when changes pend")
    p.add_argument("--refresh-only", action="store_true", help="report drift, propose nothing")
    p.add_argument("--out", metavar="FILE", help="save the plan for a later 'sand apply FILE'")
    data_loss_flag(p)
    steering_flags(p)

    p = sub.add_parser("apply", help="make the VMs match the manifest")
    manifest_arg(p)
    p.add_argument("--auto-approve", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="plan and results as JSON on stdout")
    p.add_argument("--parallelism", type=int, default=10, metavar="N")
    p.add_argument("--allow-mass-delete", action="store_true")
    data_loss_flag(p)
    steering_flags(p)
    p.add_argument("--watch", action="store_true", help="re-apply on every manifest save")
    p.add_argument("--interval", type=float, default=60.0, help="watch: re-observe every N s")
    p.add_argument("--debounce", type=float, default=0.5, help="watch: seconds to settle")

    p = sub.add_parser("destroy", help="delete every VM this manifest's project manages")
    manifest_arg(p)
    p.add_argument("--auto-approve", action="store_true")
    data_loss_flag(p)

    p = sub.add_parser(
        "reset",
        help="replace a VM from its image, keeping its preserve: paths "
        "(apply --replace VM --target VM)",
    )
    p.add_argument("vm", metavar="VM")
    p.add_argument(
        "-f", "--manifest", default="sand.yaml", metavar="FILE", help="default: ./sand.yaml"
    )
    p.add_argument("--auto-approve", action="store_true", help="do not ask for confirmation")
    data_loss_flag(p)

    p = sub.add_parser("status", help="desired vs observed, per VM")
    manifest_arg(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also check each running guest over SSH (reachable, its agents installed, "
        "its secrets on tmpfs) for Healthy; without it no guest is contacted",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        help="--deep: seconds each guest gets to answer (default 20)",
    )

    p = sub.add_parser("doctor", help="check backend credentials and permissions")
    manifest_arg(p)

    from sand.cli.verbs import add_verb_parsers

    add_verb_parsers(sub)
    add_template_parser(sub)
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    if args.command not in ("validate", "schema"):
        from sand.logs import configure

        configure(args.log_format, args.log_level)
    try:
        handler = getattr(args, "handler", None)
        if handler is None:
            handler = _handler(args.command)
        return int(handler(args))
    except ManifestError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(
            f"Error: the manifest is invalid ({count} problem{'s' * (count != 1)}).",
            file=sys.stderr,
        )
        return EXIT_ERROR
    except SandError as exc:
        from sand.redaction import redact
        from sand.terminal import continued

        # str(exc) is inert; continued() also keeps a quoted line from starting a line.
        print(f"Error: {continued(redact(str(exc)), '  ')}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED


def _handler(command: str) -> Any:
    """The function running ``command``, imported only now (so --help stays cheap)."""
    name = "cmd_" + command.replace("-", "_")
    if command in ("plan", "apply", "destroy", "reset"):
        from sand.cli import apply

        return getattr(apply, name)
    from sand.cli import commands

    return getattr(commands, name)
