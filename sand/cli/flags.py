"""The flags every command shares, and the parser class that makes a usage error exit 1.

argparse exits 2 on a usage error, but 2 is sand's "changes pending"
(``--detailed-exitcode``): a CI gate must tell a typo from a change, so every
parser (subparsers inherit the class) exits 1 instead, argparse's message kept.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from sand import defaults
from sand.cli.completion import VM_NAMES, complete_files
from sand.cli.exits import EXIT_ERROR

DEFAULT_MANIFEST = "sand.yaml"
# argparse's _SubParsersAction: private, and generic in the parser class.
Subcommands = Any
LOG_LEVELS = ("debug", "info", "warning", "error")


class ExamplesFormatter(argparse.HelpFormatter):
    """argparse's wrapping, except for lines indented two spaces (an epilog's
    examples), which are kept as written: a command line must not be re-flowed."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for line in text.splitlines():
            if line.startswith("  "):
                out.append(indent + line)
            else:
                out.append(super()._fill_text(line, width, indent))
        return "\n".join(out)


class SandParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", ExamplesFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class Number:
    """An argparse ``type`` for a number within ``[low, high]`` (``low`` excluded with
    ``above``): a value outside is a usage error naming the flag (argparse prefixes
    ``argument --FLAG:``), never a loop that spins with no pause or a pool of no workers.
    ``unit`` words the range (``seconds``); an integer-only flag passes ``whole``."""

    def __init__(
        self, low: float, high: float, *, above: bool = False, whole: bool = False, unit: str = ""
    ) -> None:
        self.low, self.high, self.above, self.whole, self.unit = low, high, above, whole, unit

    def __call__(self, text: str) -> float | int:
        try:
            value: float | int = int(text) if self.whole else float(text)
        except ValueError:
            value = float("nan")
        low_ok = value > self.low if self.above else value >= self.low
        if not (low_ok and value <= self.high):  # NaN fails both
            raise argparse.ArgumentTypeError(f"{text!r} is not {self.range_words()}")
        return value

    def range_words(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low = f"above {self.low:g}" if self.above else f"from {self.low:g}"
        return f"{kind}{unit} {low} to {self.high:g}"


PARALLELISM = Number(1, 100, whole=True)
# A watch, a sync or the board re-observes at most twice a second: 0 listed the
# backends in a loop with no pause (20,568 listings in 10 minutes).
INTERVAL = Number(0.5, 86400, unit="seconds")
DEBOUNCE = Number(0, 60, unit="seconds")
GUEST_TIMEOUT = Number(0, 3600, above=True, unit="seconds")
LEASE_WAIT = Number(0, 86400, unit="seconds")


def add_apply_flags(p: argparse.ArgumentParser) -> None:
    """What an apply and a sync run share: how many VMs at once, and the mass-delete guard."""
    p.add_argument(
        "--parallelism",
        type=PARALLELISM,
        default=defaults.PARALLELISM,
        metavar="N",
        help=f"VMs created or changed at once, 1 to 100 (default {defaults.PARALLELISM})",
    )
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="go on when the plan deletes or replaces more than half of a backend's managed VMs",
    )


def add_global_flags(p: argparse.ArgumentParser, *, on_subcommand: bool = False) -> None:
    """``--log-format``, ``--log-level`` and ``--no-color``. On a subcommand their
    default is SUPPRESS: unless given there, they leave the main parser's value alone
    (so ``sand --log-format json apply`` and ``sand apply --log-format json`` agree)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if on_subcommand else value

    p.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=default("console"),
        help="json: structured log lines on stderr, a start and a finish event per run",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=default(None),
        help="default: warning; info with --log-format json",
    )
    p.add_argument(
        "--no-color",
        action="store_true",
        default=default(False),
        help="no colour anywhere (the same as NO_COLOR=1)",
    )


def add_global_flags_to_subcommands(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand, however deep, the global flags (run once, after all
    subcommands are registered, so a subcommand added anywhere gets them)."""
    seen: set[int] = set()

    def visit(p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    if id(child) not in seen:
                        seen.add(id(child))
                        add_global_flags(child, on_subcommand=True)
                        visit(child)

    visit(parser)


def add_manifest_args(p: argparse.ArgumentParser, *, plan_file: bool = False) -> None:
    """The manifest as a positional (where it always was) or ``-f/--file/--manifest``
    (the spelling every command takes, the per-VM ones included)."""
    what = "the manifest, or a plan saved by `plan --out`" if plan_file else "the manifest"
    positional = p.add_argument(
        "manifest", nargs="?", default=None, help=f"{what} (default: ./{DEFAULT_MANIFEST})"
    )
    flag = p.add_argument(
        "-f",
        "--file",
        "--manifest",
        dest="manifest_file",
        metavar="MANIFEST",
        help=f"{what}, as a flag",
    )
    complete_files(positional, flag)


def manifest_option(p: argparse.ArgumentParser) -> None:
    """``-f FILE`` alone, for the commands whose positional is a VM (no positional
    manifest); ``--manifest`` kept for scripts written before."""
    flag = p.add_argument(
        "-f",
        "--file",
        "--manifest",
        dest="manifest",
        default=DEFAULT_MANIFEST,
        metavar="FILE",
        help=f"the manifest (default: ./{DEFAULT_MANIFEST})",
    )
    complete_files(flag)


def vm_argument(p: argparse.ArgumentParser, words: str) -> None:
    """The VM a command acts on: a name the manifest declares (completed from it)."""
    action = p.add_argument("vm", metavar="VM", help=f"{words} (a name in the manifest)")
    action.complete = VM_NAMES  # type: ignore[attr-defined]  # read by shtab


def add_approve_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--auto-approve",
        action="store_true",
        help="do not ask for confirmation (needed without a terminal)",
    )


def add_data_loss_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="delete or replace VMs even when their checkouts hold unpushed work "
        "(or they cannot be swept); never implied by --watch",
    )


def add_steering_flags(p: argparse.ArgumentParser) -> None:
    """``--target`` and ``--replace``, as plan and apply take them."""
    for flag, words in (
        ("--target", "plan and apply only this VM (repeatable); the others are left as they are"),
        (
            "--replace",
            "replace this VM although nothing changed (repeatable); preserve: paths are "
            "carried over",
        ),
    ):
        action = p.add_argument(flag, action="append", default=[], metavar="VM", help=words)
        action.complete = VM_NAMES  # type: ignore[attr-defined]  # read by shtab


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the command ``args`` were parsed for (``parser`` itself when none):
    the one whose usage a person fixing that command's words needs to see."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices.get(args.command, parser)


def resolve_manifest(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fold ``-f`` into ``args.manifest``; both given and different is a usage error."""
    if not hasattr(args, "manifest_file"):
        return
    given, flag = args.manifest, args.manifest_file
    if given is not None and flag is not None and given != flag:
        # Told by the subcommand's parser, so the usage shown is the one to fix.
        command_parser(parser, args).error(
            f"the manifest is given twice ({given} and -f {flag}): give one"
        )
    args.manifest = given or flag or DEFAULT_MANIFEST
    del args.manifest_file
