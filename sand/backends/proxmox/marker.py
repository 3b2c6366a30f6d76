"""sand's ownership marker on a PVE VM: tags (seen by the listing) and a description block.

Tags, which ``/cluster/resources`` carries, hold what a no-op plan needs::

    sand                      this VM was made by sand
    sand-project-<project>    for which project
    sand-<vmid>-<fp16>        its own vmid (a human's clone keeps the tag and fails
                              this check) and the fingerprint it last converged to
                              ("new" while it is being created)
    sand-secrets-<stamp>-<t>  the secrets stamp last delivered (sand.secrets.stamp:
                              a version and 80 bits of a salted scrypt-based hash,
                              never a value) and when (epoch seconds); absent when
                              the VM has no secrets
    sand-backend-<name>       which backend entry of the manifest made it (names that
                              are not valid tags: ``sand-backend+<hash12>``)
    sand-created-<t>          when sand made the VM (epoch seconds), for ``expires:``
                              durations; absent on a VM an older sand made
    sand-from-<fp16>          the golden base the VM was cloned from (its fingerprint);
                              absent on a VM made from its template directly
    sand-spare-<pool>         a warm pool's spare (``"pool"`` in the block too); taken
                              off when a new VM claims it

The description ends with a fenced JSON block with the full marker (project,
vmid, name, backend, both fingerprints, image, and ``op``: the incarnation, the
journal entry that cloned it, kept on every write; ``created_at``, written at the
clone and kept the same way, which the created tag mirrors), read only on a deep
(per-VM) read; written and read by ``sand.backends.proxmox.description``.

A template ``sand template build`` made carries the tag ``sand-template`` and a
block of its own (``"kind": "template"``, its name, its own vmid, the image it was
imported from). Neither is an ownership claim: a template is never a managed VM,
and the listing does not send it to a deep read. A clone inherits both; sand's
clones get their own description and lose the tag at their first config write.
A golden base sand built (``sand.backends.proxmox.bases``) carries neither the
``sand`` tag nor an identity tag, so no listing ever reads it as a VM: its tags are
``sand-golden-<fp16>`` (its fingerprint; ``sand-golden-new`` while it is being built),
``sand-project-<project>`` and the backend tag, and its description a block of its own
(``"kind": "golden"``: image, fingerprint, source, its own vmid, state ``building`` or
``ready``). Only a *template* whose tags carry its fingerprint is ready, and only a
ready base is ever cloned from: the fingerprint tag is written after the build's
last step and the conversion follows it.

Operator tags and description text are kept on every write. PVE stores tags
lower-cased, de-duplicated and sorted, so sand writes them that way too.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sand.observed import Claim, Marker, SleepMark

TOOL_TAG = "sand"
PROJECT_PREFIX = "sand-project-"
BACKEND_PREFIX = "sand-backend-"
HASHED_BACKEND_PREFIX = "sand-backend+"
TEMPLATE_TAG = "sand-template"
TEMPLATE_KIND = "template"
GOLDEN_KIND = "golden"
GOLDEN_PREFIX = "sand-golden-"
FROM_PREFIX = "sand-from-"
SPARE_PREFIX = "sand-spare-"  # a warm pool's spare: sand-spare-<pool>
_GOLDEN_TAG = re.compile(r"^sand-golden-([0-9a-f]{16}|new)$")
_FROM_TAG = re.compile(r"^sand-from-([0-9a-f]{16})$")
NEW = "new"
_IDENTITY_TAG = re.compile(r"^sand-(\d+)-([0-9a-f]{16}|new)$")
SECRETS_PREFIX = "sand-secrets-"
CREATED_PREFIX = "sand-created-"
_CREATED_TAG = re.compile(r"^sand-created-([0-9]{1,12})$")
_SECRETS_TAG = re.compile(r"^sand-secrets-([1-9][0-9]*-[0-9a-f]{20})-([0-9]{1,12})$")
# The sleep sand put the VM to (sand.observed.SleepMark): how, by whom, since when.
ASLEEP_PREFIX = "sand-asleep-"
_ASLEEP_TAG = re.compile(r"^sand-asleep-(suspended|stopped)-(idle|person)-([0-9]{1,12})$")
_TAG_SPLIT = re.compile(r"[;,\s]+")
_PVE_TAG = re.compile(r"^[a-z0-9_][a-z0-9_\-+.]*$")


@dataclass(frozen=True)
class TagMarker:
    """What the tags alone say (any field may be missing on a hand-edited VM)."""

    tool: bool
    project: str | None
    identity: str | None
    fingerprint: str | None  # "" for "new"
    secrets: str = ""  # the secrets stamp, "" when no (well-formed) tag carries one
    secrets_at: int = 0
    backend: str | None = None  # the backend tag (see backend_tag), None when absent
    created_at: int = 0  # when sand made the VM, 0 when no (well-formed) tag says
    base: str = ""  # the golden base it was cloned from (sand-from-<fp16>), "" when none
    # A golden base's fingerprint ("new" while it is built); None: not a base.
    golden: str | None = None
    asleep: SleepMark | None = None  # the sleep sand marked on it (sand-asleep-...)
    pool: str = ""  # the warm pool the VM is a spare of (sand-spare-<pool>), "" when none

    @property
    def present(self) -> bool:
        return self.tool or self.project is not None or self.identity is not None

    @property
    def complete(self) -> bool:
        return self.project is not None and self.identity is not None


def split_tags(value: object) -> list[str]:
    """PVE's tag list (``a;b``, also ``,`` or blanks) as normalised tags."""
    if not value:
        return []
    return [t.lower() for t in _TAG_SPLIT.split(str(value)) if t]


def join_tags(tags: Iterable[str]) -> str:
    """Tags as PVE stores them with the default tag-style: lower-case, unique, sorted."""
    return ";".join(sorted({t.lower() for t in tags if t}))


@functools.lru_cache(maxsize=64)  # asked twice per VM of a listing, of a few names
def backend_tag(name: str) -> str:
    """The tag naming backend entry ``name``; a name that is not a valid lower-case PVE
    tag (PVE lower-cases tags) is written as a short hash of it instead."""
    tag = BACKEND_PREFIX + name
    if name and name == name.lower() and _PVE_TAG.match(tag) and len(tag) <= 64:
        return tag
    return HASHED_BACKEND_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:12]


def backend_of_tag(tag: str | None) -> str:
    """The backend name a backend tag spells ("" for none, or a hashed one)."""
    if tag and tag.startswith(BACKEND_PREFIX):
        return tag[len(BACKEND_PREFIX) :]
    return ""


def is_sand_tag(tag: str) -> bool:
    return (
        tag in (TOOL_TAG, TEMPLATE_TAG)
        or tag.startswith(
            (
                PROJECT_PREFIX,
                SECRETS_PREFIX,
                CREATED_PREFIX,
                BACKEND_PREFIX,
                HASHED_BACKEND_PREFIX,
                GOLDEN_PREFIX,
                FROM_PREFIX,
                ASLEEP_PREFIX,
                SPARE_PREFIX,
            )
        )
        or bool(_IDENTITY_TAG.match(tag))
    )


def parse_tags(value: object) -> TagMarker:
    """What the tags say. An observation asks this of each VM's tags several times
    (the base check, classify, the bases' and the lease's scans): answered once per
    distinct text (a TagMarker is frozen, so one answer may be shared)."""
    return _parse_tags(str(value) if value else "")


@functools.lru_cache(maxsize=16384)
def _parse_tags(value: str) -> TagMarker:
    tool = False
    project = identity = fingerprint = backend = golden = None
    secrets, secrets_at, created_at, base, pool = "", 0, 0, "", ""
    asleep = None
    for tag in split_tags(value):
        if tag == TOOL_TAG:
            tool = True
        elif tag.startswith(ASLEEP_PREFIX):
            slept = _ASLEEP_TAG.match(tag)
            if slept:
                asleep = SleepMark(slept[1], int(slept[3]), slept[2])
        elif tag.startswith(SPARE_PREFIX):
            pool = tag[len(SPARE_PREFIX) :]
        elif tag.startswith(GOLDEN_PREFIX):
            found_golden = _GOLDEN_TAG.match(tag)
            if found_golden:
                golden = found_golden[1]
        elif tag.startswith(FROM_PREFIX):
            came = _FROM_TAG.match(tag)
            if came:
                base = came[1]
        elif tag.startswith((BACKEND_PREFIX, HASHED_BACKEND_PREFIX)):
            backend = tag
        elif tag.startswith(PROJECT_PREFIX):
            project = tag[len(PROJECT_PREFIX) :]
        elif tag.startswith(SECRETS_PREFIX):
            stamped = _SECRETS_TAG.match(tag)
            if stamped:
                secrets, secrets_at = stamped[1], int(stamped[2])
        elif tag.startswith(CREATED_PREFIX):
            made = _CREATED_TAG.match(tag)
            if made:
                created_at = int(made[1])
        else:
            found = _IDENTITY_TAG.match(tag)
            if found:
                identity = found[1]
                fingerprint = "" if found[2] == NEW else found[2]
    return TagMarker(
        tool,
        project,
        identity,
        fingerprint,
        secrets,
        secrets_at,
        backend,
        created_at,
        base,
        golden,
        asleep,
        pool,
    )


def asleep_tags(current: object, mark: SleepMark | None) -> str:
    """The VM's tags with its sleep mark set to ``mark`` (None: taken off), every
    other tag kept."""
    keep = [t for t in split_tags(current) if not t.startswith(ASLEEP_PREFIX)]
    if mark is not None:
        keep.append(f"{ASLEEP_PREFIX}{mark.how}-{mark.by}-{int(mark.since)}")
    return join_tags(keep)


def claims(tags: TagMarker | None, described: Marker | None) -> list[Claim]:
    """What the tags and the description block each say made the VM, as claims for
    :func:`sand.observed.ownership`. The tags claim only when they name a project and a
    vmid. A backend entry is named by its tag (:func:`backend_tag`), the one form both
    can hold: judge the claims against ``backend_tag(<this entry>)``."""
    found: list[Claim] = []
    if tags is not None and tags.project is not None and tags.identity is not None:
        found.append(Claim(tags.project, tags.identity, tags.backend or ""))
    if described is not None:
        named = backend_tag(described.backend) if described.backend else ""
        found.append(Claim(described.project, described.identity, named))
    return found


def marker_tags(marker: Marker) -> list[str]:
    fp = marker.fingerprint if re.fullmatch(r"[0-9a-f]{16}", marker.fingerprint) else NEW
    tags = [TOOL_TAG, f"sand-{marker.identity}-{fp}", PROJECT_PREFIX + marker.project.lower()]
    if marker.secrets:
        tags.append(f"{SECRETS_PREFIX}{marker.secrets}-{marker.secrets_at}")
    if marker.backend:
        tags.append(backend_tag(marker.backend))
    if marker.created_at:
        tags.append(f"{CREATED_PREFIX}{marker.created_at}")
    if re.fullmatch(r"[0-9a-f]{16}", marker.base):
        tags.append(f"{FROM_PREFIX}{marker.base}")
    if marker.pool:
        tags.append(f"{SPARE_PREFIX}{marker.pool}")
    for tag in tags:
        if not _PVE_TAG.match(tag):  # the manifest's identifier rules make this unreachable
            raise ValueError(f"not a valid PVE tag: {tag!r}")
    return tags


def merge_tags(current: object, marker: Marker) -> str:
    """The VM's tags with sand's replaced by ``marker``'s, every operator tag kept."""
    keep = [t for t in split_tags(current) if not is_sand_tag(t)]
    return join_tags([*keep, *marker_tags(marker)])


def operator_tags(current: object) -> list[str]:
    return [t for t in split_tags(current) if not is_sand_tag(t)]


# --- description -------------------------------------------------------------


def golden_tags(project: str, backend: str, fingerprint: str | None) -> list[str]:
    """A golden base's own tags; ``fingerprint`` None while it is being built."""
    return [
        f"{GOLDEN_PREFIX}{fingerprint or NEW}",
        PROJECT_PREFIX + project.lower(),
        backend_tag(backend),
    ]
