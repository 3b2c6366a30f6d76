"""Subcommands for working with one VM (shell, cp, land, publish).

Each parser sets ``handler`` to a function that imports its implementation
lazily, so building the parser stays cheap.
"""

from __future__ import annotations

from typing import Any


def add_verb_parsers(sub: Any) -> None:
    """Register the per-VM verbs on the main parser's subparsers."""
    del sub  # the verbs are added by sand.verbs as they land
