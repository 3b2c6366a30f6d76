"""sand's ownership marker on a Lima instance, and how an instance is classified.

The marker is a sidecar file, ``<LIMA_HOME>/<name>/sand-marker.json`` (mode 0600),
inside Lima's instance directory so it dies with the instance. It names the instance it
was written for: ``limactl clone`` copies every file of the directory, so a person's
copy of a managed instance carries a marker naming *another* instance and is
classified as copied, never managed.

The lima.yaml ``param`` entries ``sandProject``/``sandInstance`` are set at creation
and are only evidence of origin (Lima copies them too); they let a crashed create be
recognised before its marker was written.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from sand.backends.lima.limayaml import PARAM_INSTANCE, PARAM_PROJECT
from sand.observed import Claim, Marker, Ownership, ownership

SCHEMA = 1


@dataclass(frozen=True)
class Sidecar:
    """The marker plus what only Lima needs: a per-creation id (the incarnation, also
    used for host-key pinning), the backend entry that made it, and whether sand set
    ``limactl protect`` (None: not recorded, an older sand)."""

    marker: Marker
    uid: str
    backend: str = ""
    protect: bool | None = None

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {"schema": SCHEMA, **self.marker.to_json_dict(), "uid": self.uid}
        if self.backend:
            data["backend"] = self.backend
        if self.protect is not None:
            data["protect"] = self.protect
        return (json.dumps(data, sort_keys=True, indent=1) + "\n").encode()


def new_uid() -> str:
    return secrets.token_hex(4)


def parse_sidecar(raw: bytes) -> Sidecar | None:
    """None for anything that is not a marker sand wrote (never raises)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    fields = ("project", "name", "identity", "fingerprint", "guest_fingerprint", "image")
    if not all(isinstance(data.get(f, ""), str) for f in fields):
        return None
    if not data.get("project") or not data.get("identity"):
        return None
    secrets, secrets_at = data.get("secrets"), data.get("secrets_at")
    if not isinstance(secrets, str) or not isinstance(secrets_at, int) or not secrets:
        secrets, secrets_at = "", 0  # none recorded, or not by sand: delivered again once
    created_at = data.get("created_at")
    if not isinstance(created_at, int) or isinstance(created_at, bool) or created_at < 0:
        created_at = 0  # not recorded (an older sand), or not by sand
    marker = Marker(
        project=data["project"],
        name=str(data.get("name") or data["identity"]),
        identity=data["identity"],
        fingerprint=str(data.get("fingerprint") or ""),
        guest_fingerprint=str(data.get("guest_fingerprint") or ""),
        image=str(data.get("image") or ""),
        secrets=secrets,
        secrets_at=secrets_at,
        backend=str(data.get("backend") or ""),
        incarnation=str(data.get("uid") or ""),
        created_at=created_at,
        base=str(data.get("base") or ""),
        pool=str(data.get("pool") or ""),
    )
    protect = data.get("protect")
    return Sidecar(
        marker,
        str(data.get("uid") or ""),
        str(data.get("backend") or ""),
        protect if isinstance(protect, bool) else None,
    )


@dataclass(frozen=True)
class BaseStamp:
    """What a base instance carries once it is complete. A golden base's stamp also
    names its fingerprint, its image and the backend entry that built it; it is written
    only after the base is provisioned and stopped: a golden base without one was never
    finished, and is never cloned from."""

    project: str
    name: str
    stamp: str
    image: str
    user: str
    golden: str = ""  # a golden base's fingerprint ("": an unprovisioned clone source)
    image_name: str = ""  # the golden image's name (``images:``, or auto-<hash>)
    backend: str = ""

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {
            "schema": SCHEMA,
            "project": self.project,
            "name": self.name,
            "stamp": self.stamp,
            "image": self.image,
            "user": self.user,
        }
        if self.golden:
            data.update(golden=self.golden, image_name=self.image_name, backend=self.backend)
        return (json.dumps(data, sort_keys=True, indent=1) + "\n").encode()


def parse_base_stamp(raw: bytes) -> BaseStamp | None:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    try:
        return BaseStamp(
            project=str(data["project"]),
            name=str(data["name"]),
            stamp=str(data["stamp"]),
            image=str(data.get("image", "")),
            user=str(data.get("user", "")),
            golden=str(data.get("golden") or ""),
            image_name=str(data.get("image_name") or ""),
            backend=str(data.get("backend") or ""),
        )
    except KeyError:
        return None


@dataclass(frozen=True)
class Classification:
    ownership: Ownership
    marker: Marker | None
    uid: str = ""
    incomplete: bool = False  # ours by origin, but the create never wrote its marker


def claims(sidecar: Sidecar | None, param: Mapping[str, str], backend: str = "") -> list[Claim]:
    """What an instance says about who made it: its sidecar; without one, the lima.yaml
    ``param`` origin (a create that crashed before its marker, or a person's clone of a
    base). ``backend`` "": the asker names no entry, so no claim names one either."""
    if sidecar is not None:
        m = sidecar.marker
        return [Claim(m.project, m.identity, sidecar.backend if backend else "")]
    origin_project = param.get(PARAM_PROJECT)
    if not origin_project:
        return []
    # The origin names no backend entry (Lima copies param on clone, so it is evidence
    # of origin only); "" identity when unset reads as a copy.
    return [Claim(origin_project, param.get(PARAM_INSTANCE) or "")]


def classify(
    instance: str,
    sidecar: Sidecar | None,
    param: Mapping[str, str],
    project: str,
    backend: str = "",
) -> Classification:
    """``backend``: the backend entry asking; a marker naming another entry of this
    project is that entry's (one written without a name is adopted by whoever sees it).

    Ownership is the one rule (:func:`sand.observed.ownership`) over :func:`claims`.
    An instance that is ours only by its ``param`` origin is *incomplete*: its create
    never wrote the marker. (``limactl clone sand-base-... mine`` made by a person
    names the base's instance there, so it reads as copied.)"""
    found = ownership(
        claims(sidecar, param, backend), identity=instance, project=project, backend=backend
    )
    if sidecar is not None:
        return Classification(found, sidecar.marker, sidecar.uid)
    if found is not Ownership.MANAGED:
        return Classification(found, None)
    marker = Marker(project=project, name=instance, identity=instance, fingerprint="")
    return Classification(Ownership.MANAGED, marker, incomplete=True)
