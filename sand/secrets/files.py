"""Private host files: created 0600 in a 0700 directory, replaced atomically."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file (0600 from birth), fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def create_private_once(path: Path, data: bytes) -> bytes:
    """Create ``path`` holding ``data`` unless it exists; return what it holds.

    Two processes racing to create it agree on one content: the file appears
    by ``link`` (which fails if it exists), never half-written.
    """
    with contextlib.suppress(FileNotFoundError):
        return path.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return path.read_bytes()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` + '.lock' for read-modify-write cycles."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
