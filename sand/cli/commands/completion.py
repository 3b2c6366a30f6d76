"""``sand completion SHELL``: the script shtab makes from sand's whole parser."""

from __future__ import annotations

import argparse
import sys

import shtab

from sand.cli.parser import build_parser


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0
