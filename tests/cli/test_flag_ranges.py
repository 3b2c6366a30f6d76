"""Every numeric flag has a range and every word flag a list: a value outside is
refused at once, exit 1, naming the flag (an ``--interval 0`` watch listed the
backends 20,568 times in ten minutes; ``--parallelism 0`` started no worker)."""

from __future__ import annotations

import argparse

import pytest

from sand.cli.flags import Number
from sand.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["apply", "--watch", "--interval", "0"], "--interval"),
        (["apply", "--watch", "--interval", "-5"], "--interval"),
        (["apply", "--watch", "--interval", "nan"], "--interval"),
        (["apply", "--watch", "--debounce", "-1"], "--debounce"),
        (["apply", "--parallelism", "0"], "--parallelism"),
        (["apply", "--parallelism", "-3"], "--parallelism"),
        (["apply", "--parallelism", "2.5"], "--parallelism"),
        (["apply", "--parallelism", "100000"], "--parallelism"),
        (["apply", "--lease-wait", "-1"], "--lease-wait"),
        (["sync", "--repo", "r", "--interval", "0"], "--interval"),
        (["sync", "--repo", "r", "--parallelism", "0"], "--parallelism"),
        (["sync", "--repo", "r", "--lease-wait", "-2"], "--lease-wait"),
        (["ui", "--interval", "0"], "--interval"),
        (["status", "--deep", "--timeout", "inf"], "--timeout"),
        (["--log-level", "loud", "validate"], "--log-level"),
        (["plan", "--log-level", "loud"], "--log-level"),
        (["fork", "--count", "0", "a"], "--count"),
        (["fork", "--count", "65", "a"], "--count"),
    ],
)
def test_a_value_out_of_range_exits_1_naming_the_flag(args, flag, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"argument {flag}" in err
    assert "Traceback" not in err


def test_a_value_in_range_is_taken():
    args = build_parser().parse_args(["apply", "--interval", "0.5", "--parallelism", "1"])
    assert (args.interval, args.parallelism) == (0.5, 1)
    assert build_parser().parse_args(["plan", "--log-level", "debug"]).log_level == "debug"


def _every_action(parser: argparse.ArgumentParser):
    for action in parser._actions:
        yield parser, action
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _every_action(child)


def test_no_flag_takes_an_unbounded_number():
    loose = [
        f"{parser.prog} {'/'.join(action.option_strings)}"
        for parser, action in _every_action(build_parser())
        if action.type in (int, float) or (action.type is not None and action.nargs == 0)
    ]
    bounded = [a for _, a in _every_action(build_parser()) if isinstance(a.type, Number)]
    assert loose == []
    assert len(bounded) >= 9
