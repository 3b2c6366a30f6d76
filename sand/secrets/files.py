"""Private host files: created 0600 in a 0700 directory, replaced atomically
(the modes hold whatever the umask: :mod:`sand.state.private`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sand.state.private import (
    PRIVATE_FILE,
    ensure_private_dir,
    open_private,
    read_private,
    write_private_file,
)


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file (0600 from birth), fsync, rename."""
    write_private_file(path, data)


def create_private_once(path: Path, data: bytes) -> bytes:
    """Create ``path`` holding ``data`` unless it exists; return what it holds.

    Two processes racing to create it agree on one content: the file appears
    by ``link`` (which fails if it exists), never half-written.
    """
    with contextlib.suppress(FileNotFoundError):
        return read_private(path)
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # mkstemp asks for 0600, which a umask can narrow
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return read_private(path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` + '.lock' for read-modify-write cycles."""
    lock = path.with_name(path.name + ".lock")
    ensure_private_dir(lock.parent)
    fd = open_private(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
