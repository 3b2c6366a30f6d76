"""How a listing shows a golden base on Lima: its name, its stamp, the VMs made from it.

Pure: the listing (``observe``) and the builder (``golden``) both read bases this way.
A *retired* base is a clone-source base an earlier sand made (``sand-base-<project>-<8
hex>``, stamped without a golden fingerprint, never started); sand no longer makes or
clones from one (``create.py`` says why), so the listing shows it as a base nothing
needs and the plan deletes it, like a half-made golden base.
"""

from __future__ import annotations

import re

from sand.backends.lima import limayaml
from sand.backends.lima.context import Ctx
from sand.backends.lima.listing import LimaInstance
from sand.backends.lima.marker import BaseStamp, Sidecar
from sand.desired.spec import DesiredBase
from sand.manifest.backends.lima import RESERVED_PREFIX
from sand.observed import ObservedBase

_GOLDEN = re.compile(rf"^{RESERVED_PREFIX}-(.+)-([0-9a-f]{{12}})$")
_RETIRED = re.compile(rf"^{RESERVED_PREFIX}-(.+)-([0-9a-f]{{8}})$")
RETIRED_WHY = (
    "a clone-source base an earlier sand made: VMs are now created from their image, "
    "so nothing is cloned from it"
)


def golden_instance(project: str, base: DesiredBase) -> str:
    return f"{RESERVED_PREFIX}-{project}-{base.fingerprint[:12]}"


def is_golden(ctx: Ctx, inst: LimaInstance, stamp: BaseStamp | None) -> bool:
    """A golden base of this project: stamped as one, or (half-made) named as one and
    made by this project."""
    if stamp is not None and stamp.golden:
        return stamp.project == ctx.project and stamp.backend in ("", ctx.name)
    found = _GOLDEN.match(inst.name)
    return (
        found is not None
        and found[1] == ctx.project
        and inst.param.get(limayaml.PARAM_PROJECT) == ctx.project
    )


def is_retired(ctx: Ctx, inst: LimaInstance, stamp: BaseStamp | None) -> bool:
    """A clone-source base this project's earlier sand made: its name, and this project
    as both its ``param`` origin and (once complete) its stamp's; never a golden one."""
    found = _RETIRED.match(inst.name)
    if found is None or found[1] != ctx.project:
        return False
    if inst.param.get(limayaml.PARAM_PROJECT) != ctx.project:
        return False
    return stamp is None or (not stamp.golden and stamp.project == ctx.project)


def observed_base(
    ctx: Ctx, inst: LimaInstance, stamp: BaseStamp | None, made: dict[str, list[str]]
) -> ObservedBase:
    fingerprint = stamp.golden if stamp is not None else ""
    busy = None
    if not inst.readable:
        busy = "its directory has no lima.yaml (being cloned or deleted?)"
    elif inst.power == "running":
        busy = "it is running"
    elif inst.status not in ("Stopped", "Running"):
        busy = f"lima status {inst.status or 'unknown'}"
    return ObservedBase(
        backend=ctx.name,
        name=(stamp.image_name if stamp is not None else "") or inst.name,
        identity=inst.name,
        fingerprint=fingerprint,
        ready=bool(fingerprint),
        made=tuple(made.get(fingerprint, ())) if fingerprint else (),
        busy=busy,
        retired=RETIRED_WHY if not fingerprint and is_retired(ctx, inst, stamp) else "",
    )


def made_from(sidecars: list[Sidecar]) -> dict[str, list[str]]:
    """Base fingerprint -> the instances whose marker says they were cloned from it."""
    out: dict[str, list[str]] = {}
    for sidecar in sidecars:
        if sidecar.marker.base:
            out.setdefault(sidecar.marker.base, []).append(sidecar.marker.identity)
    return out
