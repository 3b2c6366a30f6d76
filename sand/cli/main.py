"""The ``sand`` command line. Exit codes: 0 ok / no changes, 1 error, 2 changes
pending (``--detailed-exitcode``). Heavy modules are imported inside the
command that needs them, so ``sand --version`` and ``sand validate`` stay fast.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from sand import __version__
from sand.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED
from sand.cli.flags import (
    DEBOUNCE,
    GUEST_TIMEOUT,
    INTERVAL,
    LEASE_WAIT,
    SandParser,
    add_apply_flags,
    add_global_flags,
    add_global_flags_to_subcommands,
    add_manifest_args,
    resolve_manifest,
)
from sand.cli.sync import add_sync_parser
from sand.cli.template import add_template_parser
from sand.cli.verbs import add_verb_parsers, manifest_option
from sand.errors import ManifestError, SandError


def build_parser() -> argparse.ArgumentParser:
    parser = SandParser(
        prog="sand",
        description="Keep disposable agent dev VMs in the state a manifest declares.",
    )
    parser.add_argument("--version", action="version", version=f"sand {__version__}")
    add_global_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def manifest_arg(p: argparse.ArgumentParser) -> None:
        add_manifest_args(p)  # positional or -f/--file

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
    add_apply_flags(p)
    data_loss_flag(p)
    steering_flags(p)
    p.add_argument(
        "--lease-wait",
        type=LEASE_WAIT,
        default=0.0,
        metavar="S",
        help="wait up to S seconds while another applier holds the project's lease "
        "(default 0: fail at once, naming it)",
    )
    p.add_argument("--watch", action="store_true", help="re-apply on every manifest save")
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=60.0,
        metavar="S",
        help="watch: re-observe every S seconds, 0.5 to 86400 (default 60)",
    )
    p.add_argument(
        "--debounce",
        type=DEBOUNCE,
        default=0.5,
        metavar="S",
        help="watch: seconds a save settles before the re-plan, 0 to 60 (default 0.5)",
    )

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
    manifest_option(p)  # a per-VM command: -f/--file/--manifest, as the verbs take it
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
        type=GUEST_TIMEOUT,
        metavar="S",
        help="--deep: seconds each guest gets to answer, up to 3600 (default 20)",
    )

    p = sub.add_parser("ui", help="a live board of the fleet: status, plan, apply, shell, land")
    manifest_arg(p)
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=30.0,
        metavar="S",
        help="re-observe every S seconds, 0.5 to 86400 (one listing per backend; default 30)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="re-plan on every manifest save and show drift as it is found; drift is "
        "corrected only with selfHeal: true",
    )

    p = sub.add_parser("doctor", help="check backend credentials and permissions")
    manifest_arg(p)

    add_verb_parsers(sub)
    add_template_parser(sub)
    add_sync_parser(sub)
    p = sub.add_parser("completion", help="print a shell completion script")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    add_global_flags_to_subcommands(parser)  # last: every subcommand takes them
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete-vms"]:  # the shell completion's helper, not a command
        from sand.cli.completion import print_vm_names

        return print_vm_names(words[1:])
    try:
        try:
            return _main(words)
        finally:
            sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
    except BrokenPipeError:
        # `sand plan | head`: the reader left. No traceback; stdout goes to devnull so
        # the interpreter's own last flush cannot fail again (as the Python docs say).
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # no real file behind stdout
            pass
        return EXIT_ERROR


def _main(words: list[str]) -> int:
    # Off a terminal stdout is block-buffered: in a log holding both streams, the plan
    # printed before an apply came out after its progress on stderr. Flushed at each
    # line instead, whatever PYTHONUNBUFFERED (ignored under pipx's `python -E`).
    if not sys.stdout.isatty() and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    resolve_manifest(parser, args)
    if args.no_color:
        os.environ["NO_COLOR"] = "1"  # one switch for every place colour is decided
    json_logs = args.log_format == "json"
    if json_logs or args.command not in ("validate", "schema", "completion"):
        from sand.logs import configure

        # A pipeline that asks for JSON logs wants the run's progress in them too.
        level = args.log_level or ("info" if json_logs else "warning")
        configure(args.log_format, level)
    if not json_logs:
        return _run(args)[0]
    # JSON logs are for pipelines: each run says it started and how it ended, whatever
    # --log-level (which filters everything else).
    from sand.logs import lifecycle_logger

    log, started = lifecycle_logger(), time.monotonic()
    log.info("command started", command=args.command, version=__version__)
    code, error = _run(args)
    finish = {"command": args.command, "exit_code": code}
    log.info("command finished", **finish, seconds=round(time.monotonic() - started, 3), **error)
    return code


def _run(args: argparse.Namespace) -> tuple[int, dict[str, str]]:
    """The command's exit code, and the error it ended with (for the JSON log)."""
    try:
        handler = getattr(args, "handler", None)
        if handler is None:
            handler = _handler(args.command)
        return int(handler(args)), {}
    except ManifestError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(
            f"Error: the manifest is invalid ({count} problem{'s' * (count != 1)}).",
            file=sys.stderr,
        )
        return EXIT_ERROR, {"error": f"the manifest is invalid ({count})"}
    except SandError as exc:
        from sand.redaction import redact
        from sand.terminal import continued

        # str(exc) is inert; continued() also keeps a quoted line from starting a line.
        message = redact(str(exc))
        print(f"Error: {continued(message, '  ')}", file=sys.stderr)
        return EXIT_ERROR, {"error": message}
    except KeyboardInterrupt:
        from sand.cli.inflight import interrupted_message

        message = interrupted_message()
        print(message, file=sys.stderr)
        return EXIT_INTERRUPTED, {"error": message}


def _handler(command: str) -> Any:
    """The function running ``command``, imported only now (so --help stays cheap)."""
    name = "cmd_" + command.replace("-", "_")
    if command == "completion":
        from sand.cli import completion

        return completion.cmd_completion
    if command in ("plan", "apply", "destroy", "reset"):
        from sand.cli import apply

        return getattr(apply, name)
    if command == "ui":
        from sand.cli.ui import cmd_ui  # Textual is imported by this command only

        return cmd_ui
    from sand.cli import commands

    return getattr(commands, name)
