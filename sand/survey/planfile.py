"""Saved plans: `sand plan --out FILE`, then `sand apply FILE`.

The file records the manifest's content hash and a fingerprint of what was
observed. Applying it re-observes first and refuses when either moved — even
for a plan made against an empty backend, the case where Terraform applies a
stale plan twice and duplicates everything (hashicorp/terraform#24078).

The manifest's path is recorded relative to the plan file's directory, so a
checkout moved (or cloned elsewhere) with its plan file still applies; the
content hash, not the path, is what proves it is the same manifest. Files
written before that hold an absolute path, which is read as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sand.errors import PlanRefused, StateError
from sand.plan import Plan
from sand.plan.render import plan_to_json
from sand.project import Session
from sand.state.private import open_private

MAGIC = "sand-plan/v1"


def save_plan(path: str | Path, session: Session, plan: Plan) -> None:
    plan_dir = Path(path).resolve().parent
    data = {
        "format": MAGIC,
        "manifest": os.path.relpath(session.loaded.path.resolve(), plan_dir),
        "manifest_sha256": _sha(session.loaded.text),
        "observed_fingerprint": plan.observed_fingerprint,
        "plan": plan_to_json(plan),
    }
    # 0600 whatever the umask, also when it replaces an older, looser plan file.
    try:
        fd = open_private(Path(path), os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise StateError(f"cannot write the plan to {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, default=str)


def read_plan_file(path: str | Path) -> dict[str, Any] | None:
    """The saved plan in ``path``, or None when ``path`` is not a plan file.

    Its ``manifest`` is returned as a usable path: a relative one is joined to the
    plan file's directory (an absolute one, from an older file, stays as it is)."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(1)
            if head != "{":
                return None
            fh.seek(0)
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MAGIC:
        return None
    recorded = data.get("manifest")
    if not isinstance(recorded, str) or not recorded:
        raise PlanRefused(f"the saved plan {path} names no manifest; plan again")
    manifest = (Path(path).resolve().parent / recorded).resolve()
    if not manifest.is_file():
        raise PlanRefused(
            f"the saved plan {path} is for the manifest {manifest}, which does not exist "
            "(the plan records it relative to the plan file: keep the two together)"
        )
    data["manifest"] = str(manifest)
    return data


def saved_steering(saved: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The ``--target`` and ``--replace`` names a saved plan was made with."""
    plan = saved.get("plan") if isinstance(saved.get("plan"), dict) else {}
    assert isinstance(plan, dict)

    def names(key: str) -> list[str]:
        value = plan.get(key) or []
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise PlanRefused(f"the saved plan's {key!r} is not a list of VM names; plan again")
        return value

    return names("targets"), names("replace")


def check_still_valid(saved: dict[str, Any], session: Session, plan: Plan) -> None:
    if _sha(session.loaded.text) != saved.get("manifest_sha256"):
        raise PlanRefused(
            f"the manifest {session.loaded.path} changed since the plan was saved; plan again"
        )
    if plan.observed_fingerprint != saved.get("observed_fingerprint"):
        raise PlanRefused("the VMs changed since the plan was saved (saved plan is stale)")
    if _comparable(plan_to_json(plan)["changes"]) != _comparable(
        saved.get("plan", {}).get("changes")
    ):
        raise PlanRefused("the plan computed now differs from the saved one; plan again")


def _comparable(changes: Any) -> Any:
    """The changes without where blockers point: that names the manifest by the path it
    was opened with, which a moved checkout (or a plan file's own path) changes; and
    without how long an idle VM has been idle, which grows by the minute (that it goes
    to sleep, and how, must still be the same)."""
    if not isinstance(changes, list):
        return changes
    out = []
    for change in changes:
        if isinstance(change, dict) and isinstance(change.get("sleep"), dict):
            why = change["sleep"].get("why")
            change = dict(change, sleep={"how": change["sleep"].get("how")})
            change["reasons"] = [r for r in change.get("reasons") or [] if r != why]
        if isinstance(change, dict) and isinstance(change.get("blockers"), list):
            change = dict(change)
            change["blockers"] = [
                {k: v for k, v in b.items() if k != "where"} if isinstance(b, dict) else b
                for b in change["blockers"]
            ]
        out.append(change)
    return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
