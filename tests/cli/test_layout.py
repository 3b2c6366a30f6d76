"""The CLI laid out one command a room: each command's flags in
``sand/cli/arguments/<command>.py``, its handler in ``sand/cli/commands/<command>.py``,
the dispatch a table of names; building the parser never loads a handler. And the
contracts that hold the floors cannot drift: every layers contract is exhaustive, so a
new module must be placed before ``lint-imports`` passes."""

from __future__ import annotations

import argparse
import configparser
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from sand.cli.parser import COMMANDS, build_parser, subcommands

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "sand" / "cli"


def test_each_command_has_its_flags_and_its_handler_in_rooms_of_their_own():
    flags = {p.stem for p in (CLI / "arguments").glob("*.py")} - {"__init__"}
    handlers = {p.stem for p in (CLI / "commands").glob("*.py")} - {"__init__"}
    assert flags == handlers == set(COMMANDS)
    assert subcommands(build_parser()) == set(COMMANDS)
    for name in COMMANDS:
        assert callable(importlib.import_module(f"sand.cli.arguments.{name}").add)
        assert callable(importlib.import_module(f"sand.cli.commands.{name}").run)


def test_building_every_parser_loads_no_handler_and_nothing_heavy():
    probe = (
        "import sys\n"
        "from sand.cli.parser import build_parser\n"
        "build_parser()\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    handlers = [m for m in loaded if m.startswith("sand.cli.commands.")]
    heavy = [m for m in loaded if m.split(".")[0] in ("pydantic", "yaml", "asyncssh", "rich")]
    shared = [m for m in loaded if m in ("sand.cli.applying", "sand.cli.guests")]
    assert handlers == heavy == shared == []


def test_each_help_ends_with_an_example():
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, parser in action.choices.items():
                if name == "template":  # a group: its one action carries the examples
                    parser = next(
                        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                    ).choices["build"]
                assert parser.epilog and parser.epilog.startswith("example"), name
                # A command line in an example is shown as written, not re-flowed.
                example = parser.epilog.splitlines()[1]
                assert f"\n{example}\n" in parser.format_help() + "\n", name


def _contracts() -> list[configparser.SectionProxy]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return [config[s] for s in config.sections() if s.startswith("importlinter:contract:")]


def test_every_layers_contract_is_exhaustive_and_none_lists_modules_by_hand():
    contracts = _contracts()
    layers = [c for c in contracts if c["type"] == "layers"]
    assert layers, "no layers contract"
    for contract in layers:
        # Exhaustive needs containers: a module added and not placed breaks lint-imports.
        assert contract.get("containers", "").strip(), contract.name
        assert contract.getboolean("exhaustive"), contract.name
    # A forbidden contract names its sources by hand, and a new module escapes it;
    # "only these may import X" (protected) holds whatever is added.
    assert [c.name for c in contracts if c["type"] == "forbidden"] == []


@pytest.mark.parametrize(
    "module",
    ["sand.guest.ssh", "sand.backends.lima.remote", "sand.cli.guests", "sand.cli.commands.apply"],
)
def test_a_command_reaching_a_guest_prints_no_cryptography_warning(module):
    """asyncssh names cryptography's DSA classes on import; a recent cryptography warned of
    each, ten lines on stderr of sand apply, shell, destroy and fork --apply."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
