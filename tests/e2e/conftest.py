"""Fixtures of the real-guest suite shared by more than one module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.required import missing
from tests.rig import limareap
from tests.rig._util import RigError
from tests.rig.lima import LimaRig, rig


@pytest.fixture(scope="session")
def lima_reaped() -> Iterator[LimaRig]:
    """The rig, with what a run cut short left (its Lima VMs still running, reparented
    to init) reaped before this run's first tier, and what this run made reaped after
    its last, whatever the tests' own cleanup managed (tests/rig/limareap.py)."""
    try:
        lima = rig()
    except RigError as exc:
        missing(f"the real Lima rig: {exc}")
    for root, pids in limareap.reap_stale(lima.home).items():
        print(f"real_lima: reaped {root} left by a run cut short (processes {pids})")
    try:
        yield lima
    finally:
        for root, pids in limareap.reap_owned(lima.home).items():
            print(f"real_lima: reaped {root} at the end of the run (processes {pids})")
