"""Saved plans: `sand plan --out FILE`, then `sand apply FILE`.

The file records the manifest's content hash and a fingerprint of what was
observed. Applying it re-observes first and refuses when either moved — even
for a plan made against an empty backend, the case where Terraform applies a
stale plan twice and duplicates everything (hashicorp/terraform#24078).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sand.apply.session import Session
from sand.errors import PlanRefused, StateError
from sand.plan import Plan
from sand.plan.render import plan_to_json
from sand.state.private import open_private

MAGIC = "sand-plan/v1"


def save_plan(path: str | Path, session: Session, plan: Plan) -> None:
    data = {
        "format": MAGIC,
        "manifest": str(session.loaded.path.resolve()),
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
    """The saved plan in ``path``, or None when ``path`` is not a plan file."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(1)
            if head != "{":
                return None
            fh.seek(0)
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == MAGIC else None


def check_still_valid(saved: dict[str, Any], session: Session, plan: Plan) -> None:
    if _sha(session.loaded.text) != saved.get("manifest_sha256"):
        raise PlanRefused(
            f"the manifest {session.loaded.path} changed since the plan was saved; plan again"
        )
    if plan.observed_fingerprint != saved.get("observed_fingerprint"):
        raise PlanRefused("the VMs changed since the plan was saved (saved plan is stale)")
    if plan_to_json(plan)["changes"] != saved.get("plan", {}).get("changes"):
        raise PlanRefused("the plan computed now differs from the saved one; plan again")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
