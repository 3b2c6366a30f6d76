"""What a manifest's reading is a function of, as one digest: the key of the caches
that let a run skip reading a manifest that has not changed (``sand.desired_cache``,
``sand.state.validated``).

The key covers the manifest's bytes and resolved path, sand's version and the source
of the code that reads and resolves a manifest (``sand/manifest``, ``sand/desired``):
a checkout or an editable install that changes that code changes the key even where
the version stays. A caller adds what else its answer depends on (``inputs``).
Light on purpose: a cache hit must cost less than the reading it saves.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sand import __version__

_SAND = Path(__file__).resolve().parent
# The code a manifest is read and resolved by.
_CODE = (
    _SAND / "manifest",
    _SAND / "desired",
    _SAND / "defaults.py",
    _SAND / "desired_cache.py",
    Path(__file__),
)


def code_stamp() -> str:
    """Each source file of ``_CODE`` with its size and modification time."""
    parts: list[str] = []
    for top in _CODE:
        for root, dirs, files in os.walk(top) if top.is_dir() else [("", [], [str(top)])]:
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(root, name))
                    parts.append(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def manifest_key(file: Path, raw: bytes, inputs: tuple[str, ...], *, format: int) -> str:
    """The digest of the manifest ``raw`` read from ``file``, ``inputs`` and a cache's
    own ``format`` (bumped when its files change meaning)."""
    digest = hashlib.sha256()
    for part in (str(format), __version__, code_stamp(), str(file.resolve()), *inputs):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(raw)
    return digest.hexdigest()
