"""Replay the journal before planning: settle what a crashed run left half-done."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sand.backends.protocol import Backend
from sand.errors import SandError
from sand.logs import get_logger
from sand.state.journal import Journal


@dataclass
class Recovery:
    done: list[str] = field(default_factory=list)
    # Backends whose unfinished work could not be settled: planning on them now
    # could duplicate a half-made VM, so they are treated as unknown this run.
    failed: dict[str, str] = field(default_factory=dict)


async def replay_journal(journal: Journal, backends: Mapping[str, Backend]) -> Recovery:
    """Let each backend settle its unfinished entries, oldest first."""
    log = get_logger()
    out = Recovery()
    # A replace is made of backend operations with entries of their own: settle those
    # first (a half-made clone is removed or adopted), then the replace around them.
    pending = sorted(journal.pending(), key=lambda e: e.get("op") == "replace")
    for entry in pending:
        name = str(entry.get("backend"))
        backend = backends.get(name)
        if backend is None or name in out.failed:
            # A backend that left the manifest keeps its entries until it comes back.
            continue
        what = f"{entry.get('op')} of {entry.get('vm')} ({name})"
        try:
            if entry.get("op") == "replace":
                from sand.apply.replace import recover_replace

                how = await recover_replace(entry, backend, journal)
            else:
                how = await backend.recover(entry, journal)
        except SandError as exc:
            out.failed[name] = f"could not settle the interrupted {what}: {exc}"
            log.error("recovery failed", vm=entry.get("vm"), op=entry.get("op"), error=str(exc))
            continue
        if any(p["id"] == entry["id"] for p in journal.pending()):
            journal.settle(str(entry["id"]), how)  # unless the backend already did
        log.info("recovered", vm=entry.get("vm"), op=entry.get("op"), outcome=how)
        out.done.append(f"{what}: {how}")
    return out
