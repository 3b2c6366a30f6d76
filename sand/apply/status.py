"""`sand status`: desired vs observed per VM, with Argo/kstatus-style conditions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sand.apply.reconcile import compute_plan
from sand.apply.session import open_session
from sand.plan.model import Action
from sand.state.records import load_records


def status_rows(manifest: str | Path) -> list[dict[str, Any]]:
    session = open_session(manifest, lock=False)

    async def run() -> Any:
        try:
            return await compute_plan(session, checks=False)
        finally:
            await session.close()

    plan = asyncio.run(run())
    records = load_records(session.project)
    rows: list[dict[str, Any]] = []
    for c in plan.changes:
        d, o = c.desired, c.observed
        record = records.get(c.vm, {})
        provisioned: bool | str = "n/a"
        if d is not None and d.provision:
            provisioned = bool(o and o.marker and o.marker.guest_fingerprint == d.guest_fingerprint)
        rows.append(
            {
                "vm": c.vm,
                "backend": c.backend,
                "identity": c.identity,
                "action": c.action.value,
                "reasons": list(c.reasons),
                "desired": None
                if d is None
                else {
                    "state": d.state,
                    "cpus": d.cpus,
                    "memory": d.memory,
                    "disk": d.disk,
                    "image": d.image,
                    # names only: which secrets sit at which scope, never values
                    "secret_scopes": [{"name": s.name, "scope": s.scope} for s in d.secrets],
                },
                "observed": None
                if o is None
                else {"power": o.power, "cpus": o.cpus, "memory": o.memory, "disk": o.disk},
                "conditions": {
                    "Synced": c.action is Action.NOOP and not c.drift,
                    "Healthy": bool(o and d and o.power == d.state and not o.findings),
                    "Provisioned": provisioned,
                },
                "drift": [f.field for f in c.drift],
                "last_reconcile": record.get("at"),
                "last_error": record.get("error") or None,
            }
        )
    return rows
