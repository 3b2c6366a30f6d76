"""Desired VMs as plain data and back: what the desired-state cache holds
(``sand.project``), so a plan of an unchanged manifest skips reading, validating and
resolving it. Every value a DesiredVM holds is data the manifest gave (never a secret's
value: those are resolved on the host at each run, and no DesiredVM holds one).

Read back without running the frozen ``__init__`` of each record (its ~40 fields):
that was most of reading a 5,000-VM cache. The writer checks that what it wrote reads
back equal, so a record of a new shape that this module does not know is never cached.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sand.desired.fork import DesiredFork
from sand.desired.parts import DesiredPort, DesiredRepo, DesiredSecret, ImageStep
from sand.desired.spec import DesiredBase, DesiredVM, MachineContent
from sand.manifest.expiry import Expiry
from sand.manifest.idle import IdlePolicy

T = TypeVar("T")


def as_data(value: Any) -> Any:
    """A desired record (and what it holds) as JSON-ready data: each record a mapping
    of its fields, each tuple a list."""
    if isinstance(value, tuple | list):
        return [as_data(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is None:
        return value
    return {name: as_data(getattr(value, name)) for name in fields}


def _made(cls: type[T], fields: dict[str, Any]) -> T:
    record = object.__new__(cls)
    record.__dict__.update(fields)  # frozen: no __init__, no __setattr__ (see above)
    return record


def _optional(cls: type[T], data: dict[str, Any] | None) -> T | None:
    return None if data is None else _made(cls, data)


def _base(data: dict[str, Any] | None) -> DesiredBase | None:
    if data is None:
        return None
    content = data["content"]
    content = {
        **content,
        "packages": tuple(content["packages"]),
        "agents": tuple(content["agents"]),
        "steps": tuple(_made(ImageStep, s) for s in content["steps"]),
    }
    return _made(DesiredBase, {**data, "content": _made(MachineContent, content)})


def _fork(data: dict[str, Any] | None) -> DesiredFork | None:
    if data is None:
        return None
    return _made(DesiredFork, {**data, "logins": tuple(data["logins"])})


def vm_of(data: dict[str, Any]) -> DesiredVM:
    """A DesiredVM from :func:`as_data`'s mapping of one."""
    fields = dict(data)
    fields.update(
        ports=tuple(_made(DesiredPort, p) for p in data["ports"]),
        agents=tuple(data["agents"]),
        packages=tuple(data["packages"]),
        repos=tuple(_made(DesiredRepo, r) for r in data["repos"]),
        secrets=tuple(_made(DesiredSecret, s) for s in data["secrets"]),
        preserve=tuple(data["preserve"]),
        expires=_optional(Expiry, data["expires"]),
        idle=_optional(IdlePolicy, data["idle"]),
        base=_base(data["base"]),
        fork=_fork(data["fork"]),
    )
    return _made(DesiredVM, fields)


def same(read: tuple[DesiredVM, ...], built: tuple[DesiredVM, ...]) -> bool:
    """Whether VMs read back are the VMs built, fingerprints included (which a
    DesiredVM's own equality leaves out)."""
    return read == built and all(
        (a.fingerprint, a.guest_fingerprint) == (b.fingerprint, b.guest_fingerprint)
        for a, b in zip(read, built, strict=True)
    )
