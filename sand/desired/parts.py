"""The small records a desired VM is made of (its repos, secrets, ports, and a golden
image's own steps; re-exported by ``sand.desired.spec`` and ``sand.desired``), and how
a few of its values are chosen between the VM's own and its defaults'."""

from __future__ import annotations

from dataclasses import dataclass, field

from sand.manifest.expiry import Expiry, parse_expiry


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


def preserved(own: list[str] | None, default: list[str] | None) -> list[str]:
    """The VM's own list replaces the default one (an empty list preserves nothing)."""
    return own if own is not None else (default or [])


def expiry_of(text: str | None) -> Expiry | None:
    """The VM's own ``expires:`` (``never`` too) wins over its defaults'."""
    return parse_expiry(text) if text else None


def first_set(*values: bool | None) -> bool:
    return next(v for v in values if v is not None)


def norm_path(path: str) -> str:
    return path.rstrip("/") if len(path) > 1 else path
