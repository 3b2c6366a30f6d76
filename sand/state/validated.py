"""Manifests found valid, as ``sand validate`` last read them: a manifest checked again
unchanged (a pre-commit hook on every commit, an editor on every save of another file)
is answered from one small file instead of loading the models that check it.

One file per manifest (named by a digest of its resolved path) in sand's cache
directory. Its key (``sand.manifest_key``) covers the manifest's bytes and path, sand's
version and the code that reads a manifest, and the one part of this machine a check
reads: its tz database (a VM's ``timezone`` must be a zone of it), by the time each of
its directories last changed. Only a valid reading is kept; an invalid one is checked
again each time (its problems are what the person reads). Anything else found there is
a miss.
"""

from __future__ import annotations

import json
import os
import zoneinfo
from pathlib import Path

from sand.manifest_key import manifest_key
from sand.state.cache import manifest_cache_file, read_cached, write_cached

# Bumped when the file's layout changes meaning.
FORMAT = 1


def _tz_stamp() -> str:
    """The tz database's directories (where the check looks: ``zoneinfo.TZPATH``), each
    with the time it last changed: a zone added or removed changes its directory."""
    found = []
    for path in zoneinfo.TZPATH:
        try:
            found.append(f"{path}:{os.stat(path).st_mtime_ns}")
        except OSError:
            continue
    return ";".join(found)


def _path(file: Path) -> Path:
    return manifest_cache_file("validated", file)


def validated_before(file: Path, raw: bytes) -> tuple[int, int] | None:
    """(VMs, backends) of the manifest ``raw`` at ``file`` when it was found valid in
    exactly this state; else None."""
    data = read_cached(_path(file))
    if data is None:
        return None
    try:
        stored = json.loads(data)
        if stored["key"] != manifest_key(file, raw, (_tz_stamp(),), format=FORMAT):
            return None
        return int(stored["vms"]), int(stored["backends"])
    except (ValueError, KeyError, TypeError):
        return None


def keep_validated(file: Path, raw: bytes, vms: int, backends: int) -> None:
    """Remember that the manifest ``raw`` at ``file`` is valid, with its counts."""
    key = manifest_key(file, raw, (_tz_stamp(),), format=FORMAT)
    text = json.dumps({"key": key, "vms": vms, "backends": backends}, separators=(",", ":"))
    write_cached(_path(file), text.encode())
