"""What ``sand --help`` and the errors a person meets first say: every subcommand
described, every argument explained, ``-f/--file/--manifest`` on every command that
reads a manifest, ``sand shell``'s command optional, and errors in the words the person
used (``sand reset VM``, ``git fetch``), through the real parser and ``python -m sand``."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace

import pytest

from sand.cli.main import build_parser
from sand.errors import SandError
from sand.loops.gitmirror import GitMirror
from sand.observed import Observation
from sand.plan import make_plan
from sand.plan.render import render_text
from tests.cli.helpers import Sand
from tests.plan.helpers import POLICIES, converged, desired


def _commands(parser: argparse.ArgumentParser, name: str = "sand"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, child in action.choices.items():
                yield f"{name} {word}", child
                yield from _commands(child, f"{name} {word}")


def test_every_command_is_described_and_every_argument_explained():
    undescribed, unexplained = [], []
    for name, parser in _commands(build_parser()):
        if not parser.description:
            undescribed.append(name)
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction) and not action.help:
                unexplained.append(f"{name} {action.option_strings or action.dest}")
    assert undescribed == [] and unexplained == []


def test_every_command_reading_a_manifest_takes_f_file_and_manifest():
    takes = {}
    for name, parser in _commands(build_parser()):
        for action in parser._actions:
            if (
                action.dest in ("manifest", "manifest_file", "manifest_files")
                and action.option_strings
            ):
                takes[name] = set(action.option_strings)
    expected = {"validate", "plan", "apply", "destroy", "reset", "status", "ui", "doctor"}
    expected |= {"shell", "cp", "land", "publish", "wake", "sleep", "fork", "template build"}
    assert set(takes) == {f"sand {c}" for c in expected}
    assert all(flags == {"-f", "--file", "--manifest"} for flags in takes.values()), takes


def test_shell_asks_only_for_its_vm(tmp_path):
    proc = Sand(tmp_path).run("shell")
    assert proc.returncode == 1
    assert "the following arguments are required: VM\n" in proc.stderr


def test_reset_names_what_the_person_typed(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "r-1"}]))
    proc = sand.run("reset", "nope", "--auto-approve")
    assert proc.returncode == 1
    assert "Error: sand reset 'nope': not a VM of the manifest" in proc.stderr
    assert "--replace" not in proc.stderr and "--target" not in proc.stderr
    assert fakepve_server.vms() == []


def test_a_failed_fetch_names_git_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    mirror = GitMirror(f"file://{tmp_path}/no-such-repo", "main")
    with pytest.raises(SandError) as failed:
        asyncio.run(mirror.fetch())
    assert str(failed.value).startswith(f"git fetch of file://{tmp_path}/no-such-repo failed:")


def test_a_lima_vm_is_named_once_in_the_plan():
    state = desired()
    obs = converged(state)
    (c,) = obs["laptop"].vms
    obs["laptop"] = Observation("laptop", (replace(c, cpus=1),))  # c: 2 CPUs wanted
    text = render_text(make_plan(state, obs, POLICIES))
    assert "  # c (laptop) will be updated in place" in text, text
    assert "(laptop, c)" not in text


def test_a_usage_written_by_hand_names_every_flag_of_its_command():
    """shell, cp and fork write their usage line by hand: it must not fall behind the
    flags (fork's left out --apply)."""
    for name, parser in _commands(build_parser()):
        if parser.usage is None:
            continue  # argparse's own, from the flags themselves
        for action in parser._actions:
            flags = action.option_strings
            if flags and flags[0] not in ("-h", "--log-format", "--log-level", "--no-color"):
                assert any(f"{f} " in parser.usage or f"{f}]" in parser.usage for f in flags), (
                    name,
                    flags,
                )
