"""The small records a desired VM is made of: its repos, secrets, ports, and a golden
image's own steps. Re-exported by ``sand.desired.spec`` (and ``sand.desired``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DesiredRepo:
    name: str
    url: str
    branch: str | None
    path: str
    token_secret: str | None


@dataclass(frozen=True)
class DesiredSecret:
    """Where a secret goes. The value is resolved separately and never stored here."""

    name: str
    scope: str
    env: str


@dataclass(frozen=True, order=True)
class DesiredPort:
    guest: int
    host: int


@dataclass(frozen=True)
class ImageStep:
    """One of a golden image's own steps: shell text run as root on its base."""

    name: str
    run: str = field(repr=False)
    timeout: float = 1800.0
