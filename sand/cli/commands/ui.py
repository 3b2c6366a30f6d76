"""``sand ui``: the board (``sand.cli.ui``, the one user of Textual)."""

from __future__ import annotations

import argparse

from sand.cli.ui import cmd_ui


def run(args: argparse.Namespace) -> int:
    return cmd_ui(args)
