"""Desired VMs as plain data and back: what the desired-state cache holds
(``sand.project``), so a plan of an unchanged manifest skips reading, validating and
resolving it. Every value a DesiredVM holds is data the manifest gave (never a secret's
value: those are resolved on the host at each run, and no DesiredVM holds one).

Read back without running the frozen ``__init__`` of each record (its ~40 fields):
that was most of reading a 5,000-VM cache. ``tests/desired/test_desired_cache.py``
reads back a manifest using every kind of field a DesiredVM holds, so a new field this
module does not carry fails there, not in a plan.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sand.desired.brokered import BrokerGrant
from sand.desired.fork import DesiredFork
from sand.desired.parts import DesiredPort, DesiredRepo, DesiredSecret, ImageStep
from sand.desired.spec import DesiredBase, DesiredVM, MachineContent
from sand.manifest.egress import EgressPolicy
from sand.manifest.expiry import Expiry
from sand.manifest.idle import IdlePolicy

T = TypeVar("T")
_VM_FIELDS = DesiredVM.__dataclass_fields__.keys()


def vm_data(vm: DesiredVM) -> dict[str, Any]:
    """A DesiredVM as JSON-ready data: its fields, each record it holds a mapping of its
    own (tuples of plain values stay tuples: JSON writes them as lists). A field of a
    kind this module does not know stays a record, which JSON refuses: nothing cached."""
    data = dict(vm.__dict__)
    data.update(
        ports=[p.__dict__ for p in vm.ports],
        repos=[r.__dict__ for r in vm.repos],
        secrets=[s.__dict__ for s in vm.secrets],
        expires=None if vm.expires is None else vm.expires.__dict__,
        idle=None if vm.idle is None else vm.idle.__dict__,
        base=None if vm.base is None else _base_data(vm.base),
        fork=None if vm.fork is None else vm.fork.__dict__,
        egress=None if vm.egress is None else vm.egress.__dict__,
        brokered=[g.__dict__ for g in vm.brokered],
    )
    return data


def _base_data(base: DesiredBase) -> dict[str, Any]:
    content = {**base.content.__dict__, "steps": [s.__dict__ for s in base.content.steps]}
    return {**base.__dict__, "content": content}


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
    """A DesiredVM from :func:`vm_data`'s mapping of one (KeyError: not one of this
    sand's: a field missing or too many)."""
    if data.keys() != _VM_FIELDS:
        raise KeyError("not a desired VM of this sand")
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
        egress=_egress(data["egress"]),
        brokered=tuple(_grant(g) for g in data["brokered"]),
    )
    return _made(DesiredVM, fields)


def _egress(data: dict[str, Any] | None) -> EgressPolicy | None:
    if data is None:
        return None
    lists = ("domains", "cidrs", "ports")
    return _made(EgressPolicy, {**data, **{k: tuple(data[k]) for k in lists}})


def _grant(data: dict[str, Any]) -> BrokerGrant:
    return _made(
        BrokerGrant,
        {
            **data,
            **{k: tuple(data.get(k, ())) for k in ("repositories", "push", "api", "https_hosts")},
            "env": tuple(tuple(place) for place in data.get("env", ())),
        },
    )
