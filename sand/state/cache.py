"""sand's cache on this host: files it can always make again, read only as a shortcut.

It lives in the user's cache directory (platformdirs: ``~/.cache/sand`` on Linux,
``~/Library/Caches/sand`` on macOS), or under $SAND_CACHE_DIR; 0700 like the state dir.
Deleting it at any time costs the next run its time, never its result: a reader checks
what it finds (format, key) and treats anything else as a miss.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from platformdirs import user_cache_dir

from sand.errors import StateError
from sand.state.private import ensure_private_dir, read_private, write_private_file


def cache_root() -> Path:
    override = os.environ.get("SAND_CACHE_DIR")
    if override:
        return Path(override)
    return Path(user_cache_dir("sand", appauthor=False))


def cache_file(kind: str, name: str) -> Path:
    """Where the cached ``name`` of ``kind`` ("desired", ...) is kept."""
    return cache_root() / kind / name


def manifest_cache_file(kind: str, manifest: Path) -> Path:
    """Where what of ``kind`` is kept about the manifest at ``manifest``: one file per
    manifest, named by a digest of its resolved path."""
    name = hashlib.sha256(str(manifest.resolve()).encode()).hexdigest()[:32]
    return cache_file(kind, f"{name}.json")


def read_cached(path: Path) -> bytes | None:
    """The file's bytes, or None when it cannot be read (missing, replaced by something
    that is not a regular file, unreadable): a miss, whatever the reason."""
    try:
        return read_private(path)
    except (OSError, StateError):
        return None


def write_cached(path: Path, data: bytes) -> None:
    """Replace the file atomically (a reader never sees half of it); a cache that cannot
    be written (a read-only home, a full disk) is no error: the next run misses again."""
    try:
        root = cache_root()
        ensure_private_dir(path.parent, own_from=root)
        write_private_file(path, data)
    except OSError:
        return
