from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.verbs.forge_standin import ForgeStandin


@pytest.fixture
def forge() -> Iterator[ForgeStandin]:
    standin = ForgeStandin().start()
    try:
        yield standin
    finally:
        standin.stop()
