"""Replay the journal before planning: settle what a crashed run left half-done."""

from __future__ import annotations

from collections.abc import Mapping

from sand.backends.protocol import Backend
from sand.logs import get_logger
from sand.state.journal import Journal


async def replay_journal(journal: Journal, backends: Mapping[str, Backend]) -> list[str]:
    """Let each backend settle its unfinished entries; return what was done."""
    log = get_logger()
    done: list[str] = []
    for entry in journal.pending():
        backend = backends.get(str(entry.get("backend")))
        if backend is None:
            # The backend left the manifest; keep the entry until it comes back.
            continue
        how = await backend.recover(entry, journal)
        journal.settle(str(entry["id"]), how)
        log.info("recovered", vm=entry.get("vm"), op=entry.get("op"), outcome=how)
        done.append(f"{entry.get('op')} of {entry.get('vm')} ({entry.get('backend')}): {how}")
    return done
