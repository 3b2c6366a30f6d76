"""Prerequisites of the test rigs: skipped on a developer's machine, required in CI.

``.ci/run`` exports ``SAND_RIG_REQUIRED=1`` (``CI`` counts too): there a missing
prerequisite (not root, no sshd, no qemu, no git...) fails the test that needs it,
because a rig that silently skips proves nothing. Off CI the same test is skipped
with the reason, so a laptop without root can still run the rest.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def rig_required() -> bool:
    return bool(os.environ.get("SAND_RIG_REQUIRED") or os.environ.get("CI"))


def missing(reason: str) -> NoReturn:
    """A prerequisite of this test is missing: fail in CI, skip elsewhere."""
    if rig_required():
        pytest.fail(f"{reason} -- required (SAND_RIG_REQUIRED is set)", pytrace=False)
    pytest.skip(reason)


def require(condition: bool, reason: str) -> None:
    if not condition:
        missing(reason)
