"""Whether to colour what goes to a stream."""

from __future__ import annotations

import os
from typing import Any


def use_colour(stream: Any) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org);
    ``--no-color`` sets it (``sand.cli.main``)."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
