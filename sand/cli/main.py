"""The ``sand`` command line. Exit codes: 0 ok / no changes, 1 error, 2 changes
pending (``--detailed-exitcode``). The words are parsed by the named command's flags
alone (``sand.cli.arguments``); its handler, ``sand.cli.commands.<command>``, is imported
only then, so ``sand --version`` and ``sand validate`` stay fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from sand import __version__
from sand.cli.completion import print_vm_names
from sand.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED
from sand.cli.flags import command_parser, resolve_manifest
from sand.cli.parser import build_parser, subcommands

__all__ = ["build_parser", "main"]


# The cyclic collector's first generation runs every 100,000 allocations, not 700:
# reading a manifest and a listing allocates millions of objects that all live to the
# end, and a no-op plan of 5,000 VMs spent 12% of its CPU re-scanning them.
GC_THRESHOLD = (100_000, 10, 10)
# Commands that read, answer and end: the cyclic collector does not run at all while
# they do (it still cost a 5,000-VM plan 8% of its CPU at the threshold above), as
# the little garbage they leave in cycles goes with the process.
COLLECTOR_OFF = frozenset({"plan", "validate"})
# Commands that may answer before their handler (and its imports) loads: a manifest
# found valid unchanged since (``sand.cli.quick``).
QUICK = frozenset({"validate"})
# Python collects cycles once more as it shuts down, collector on or off: for these
# commands run as a program, a pass over everything they built (all of it alive to the
# end, and freed with the process): ~20 ms of a `sand validate`, ~30 ms of a plan.
# What they built is frozen at their end instead (``gc.freeze``), out of that pass.


def main(argv: Sequence[str] | None = None) -> int:
    gc.set_threshold(*GC_THRESHOLD)
    # No pydantic plugin sees sand's manifests (they name secret files and hosts), and
    # none is looked for: the scan of every installed package's entry points cost each
    # validate and plan ~3 ms. Pydantic's own switch, read when a model is first built.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete-vms"]:  # the shell completion's helper, not a command
        return print_vm_names(words[1:])
    try:
        try:
            code = _main(words, program=argv is None)
        finally:
            sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
    except BrokenPipeError:
        # `sand plan | head`: the reader left. No traceback; stdout goes to devnull so
        # the interpreter's own last flush cannot fail again (as the Python docs say).
        from sand.logs import reader_left

        reader_left(sys.stdout)
        _flush_stderr()
        return EXIT_ERROR
    _flush_stderr()
    return code


def _flush_stderr() -> None:
    """Flush stderr now: when its reader has left (`sand apply 2>&1 | head`), it goes to
    devnull, so that the exit code stays the command's (Python exits 120 when its own
    last flush fails)."""
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        from sand.logs import reader_left

        reader_left(sys.stderr)


def _main(words: list[str], *, program: bool = False) -> int:
    """``program``: sand is the process (its own argv), not a caller in it (the tests)."""
    # Off a terminal stdout is block-buffered: in a log holding both streams, the plan
    # printed before an apply came out after its progress on stderr. Flushed at each
    # line instead, whatever PYTHONUNBUFFERED (ignored under pipx's `python -E`).
    if not sys.stdout.isatty() and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    parser = _parser_for(words)
    args, extra = parser.parse_known_args(words)
    if extra:
        # argparse says this with the top-level usage; the command's is the one to fix.
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    resolve_manifest(parser, args)
    if args.no_color:
        os.environ["NO_COLOR"] = "1"  # one switch for every place colour is decided
    json_logs = args.log_format == "json"
    if json_logs or args.command not in ("validate", "schema", "completion"):
        # here, not at the top: sand --help starts without it
        from sand.logs import configure

        # A pipeline that asks for JSON logs wants the run's progress in them too.
        level = args.log_level or ("info" if json_logs else "warning")
        configure(args.log_format, level)
    if not json_logs:
        return _run(args, program=program)[0]
    # JSON logs are for pipelines: each run says it started and how it ended, whatever
    # --log-level (which filters everything else).
    from sand.logs import lifecycle_logger

    log, started = lifecycle_logger(), time.monotonic()
    log.info("command started", command=args.command, version=__version__)
    code, error = _run(args, program=program)
    finish = {"command": args.command, "exit_code": code}
    log.info("command finished", **finish, seconds=round(time.monotonic() - started, 3), **error)
    return code


# The global flags that take a value (``--log-level debug``), skipped to find the command.
_VALUED = ("--log-format", "--log-level")


def _parser_for(words: list[str]) -> argparse.ArgumentParser:
    """The parser of the command the words name, alone; the whole one for ``--help``,
    ``--version``, no command or a word that is none (its error lists them all)."""
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif not word.startswith("-"):
            parser = build_parser(only=word)
            if word in subcommands(parser):
                return parser
            break
        elif word not in ("--no-color",) and not word.startswith(tuple(f"{v}=" for v in _VALUED)):
            break  # --help, --version or a flag the parser will refuse: all of it
    return build_parser()


def _run(args: argparse.Namespace, *, program: bool = False) -> tuple[int, dict[str, str]]:
    """The command's exit code, and the error it ended with (for the JSON log)."""
    # here, not at the top: sand --version starts without them (and dataclasses)
    from sand.errors import ManifestError, SandError
    from sand.terminal import continued

    collecting = gc.isenabled()
    if args.command in COLLECTOR_OFF:
        gc.disable()
    try:
        code = _quick(args.command)(args) if args.command in QUICK else None
        return int(code if code is not None else _handler(args.command)(args)), {}
    except ManifestError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        summary = exc.summary or f"the manifest is invalid ({count} problem{'s' * (count != 1)})"
        print(f"Error: {summary}.", file=sys.stderr)
        return EXIT_ERROR, {"error": exc.summary or f"the manifest is invalid ({count})"}
    except SandError as exc:
        # here, not at the top: sand --help starts without it
        from sand.redaction import redact

        # str(exc) is inert; continued() also keeps a quoted line from starting a line.
        message = redact(str(exc))
        print(f"Error: {continued(message, '  ')}", file=sys.stderr)
        return EXIT_ERROR, {"error": message}
    except KeyboardInterrupt:
        # here, not at the top: sand --help starts without it
        from sand.cli.inflight import interrupted_message

        message = interrupted_message()
        print(message, file=sys.stderr)
        return EXIT_INTERRUPTED, {"error": message}
    finally:
        if program and args.command in COLLECTOR_OFF:
            gc.freeze()  # left to the exit to free, unscanned (see COLLECTOR_OFF)
        if collecting:  # a caller in the same process (the tests) gets it back on
            gc.enable()


def _quick(command: str) -> Any:
    """The answer ``command`` may give before its handler loads: ``answer`` of its
    module in ``sand.cli.quick`` (the exit code, or None to run the handler)."""
    return importlib.import_module(f"sand.cli.quick.{command}").answer


def _handler(command: str) -> Any:
    """The function running ``command``: ``run`` of its module in ``sand.cli.commands``,
    imported only now (so --help and the parsing stay cheap)."""
    return importlib.import_module(f"sand.cli.commands.{command}").run
