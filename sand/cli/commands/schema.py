"""``sand schema``: the manifest's JSON Schema, or an output's with ``--output``: each the
file shipped in the package, byte for byte (what ``$ref``s and editors load), never one
built at run time, which would differ with the pydantic installed."""

from __future__ import annotations

import argparse
import sys
from importlib.resources import files

from sand.cli.exits import EXIT_OK


def run(args: argparse.Namespace) -> int:
    name = args.output or "sand"
    sys.stdout.write((files("sand") / "schemas" / f"{name}.schema.json").read_text())
    return EXIT_OK
