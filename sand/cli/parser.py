"""The ``sand`` argument parser, built from one module of flags a command
(``sand.cli.arguments``): every subcommand with a description and examples, every
argument with its help (``sand COMMAND --help`` is the reference a person reaches first).

Building it imports argparse and the flag modules only; a command's handler
(``sand.cli.commands``) is loaded by ``sand.cli.main`` when the command runs.
"""

from __future__ import annotations

import argparse
import importlib

from sand import __version__
from sand.cli.flags import SandParser, add_global_flags, add_global_flags_to_subcommands

# Every command, in the order `sand --help` lists them. A command's flags are in
# sand/cli/arguments/<name>.py and its handler in sand/cli/commands/<name>.py: a new
# command is those two modules and its name here.
COMMANDS = (
    "validate",
    "schema",
    "doctor",
    "plan",
    "apply",
    "destroy",
    "reset",
    "status",
    "ui",
    "shell",
    "cp",
    "land",
    "wake",
    "sleep",
    "publish",
    "fork",
    "template",
    "sync",
    "audit",
    "completion",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``only``, that command's alone (when it is one):
    the others cost each run ~4 ms to build for nothing."""
    parser = SandParser(
        prog="sand",
        description="Keep disposable agent dev VMs (Lima, Proxmox VE) in the state a "
        "manifest declares: validate, plan, apply; status, doctor and a live board; per-VM "
        "shell, cp, land and publish. `sand COMMAND --help` describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"sand {__version__}")
    add_global_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only in COMMANDS else COMMANDS:
        importlib.import_module(f"sand.cli.arguments.{name}").add(sub)
    add_global_flags_to_subcommands(parser)  # last: every subcommand takes them
    return parser


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the commands ``parser`` has a parser for."""
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
