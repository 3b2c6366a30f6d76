"""Private host files: created 0600 in a 0700 directory, replaced atomically
(the modes hold whatever the umask: :mod:`sand.state.private`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sand.state.private import ensure_private_dir, open_private, write_private_file


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file (0600 from birth), fsync, rename."""
    write_private_file(path, data)


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
