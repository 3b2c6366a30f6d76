"""Private host files.

The one rule for files of the user's that hold credentials (API tokens,
secret files, the drupal.org token): a regular file of this user that neither
group nor others can read or write. A looser file is refused, never "fixed"
by sand, naming the file and the command that fixes it.

sand's own state (everything under the state dir, saved plans) is the other
kind: sand creates it 0600/0700 whatever the umask, and tightens its own
files and directories when it finds them looser.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from sand.errors import StateError


def private_file_problem(path: Path) -> str | None:
    """Why ``path`` may not hold a credential (phrased to follow its name), or None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return f"is open to group or others (mode {mode:04o}); restrict it with: chmod 600 {path}"
    if st.st_uid != os.getuid():
        return "belongs to another user"
    return None


# --- sand's own state: 0700 directories, 0600 files, whatever the umask ------------
#
# A umask only takes bits away, so asking os.open/mkdir for 0600/0700 is not
# enough (umask 0777 gives 0000); every helper sets the mode explicitly after
# creating. And an existing file or directory of sand's own with a looser mode
# (an older sand, a hand edit, a restore from backup) is tightened, not trusted.

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def ensure_private_dir(path: Path, *, own_from: Path | None = None) -> Path:
    """``path`` as a directory of sand's own, mode 0700.

    Missing directories on the way are created 0700. ``path`` and, when
    ``own_from`` is given, its ancestors up to and including ``own_from`` (sand's
    state root) are sand's: an existing one with another mode is set to 0700.
    Ancestors above ``own_from`` are the user's and left alone.
    """
    missing: list[Path] = []
    here = path
    while not os.path.lexists(here) and here.parent != here:
        missing.append(here)
        here = here.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another run made it meanwhile
            os.mkdir(d, PRIVATE_DIR)
        _tighten_dir(d)
    here = path
    while True:
        _tighten_dir(here)
        if own_from is None or here == own_from or here.parent == here:
            break
        here = here.parent
    return path


def _tighten_dir(path: Path) -> None:
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"sand's state path {path} is not a directory")
    if st.st_uid != os.getuid():
        raise StateError(f"sand's state directory {path} belongs to another user")
    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)


def open_private(path: Path, flags: int) -> int:
    """A descriptor on ``path`` (created if missing): a regular file of mode
    0600, never reached through a symlink. ``flags`` are the access flags
    (``os.O_WRONLY | os.O_APPEND``, ``os.O_RDWR``, ...)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"sand's state file {path} is not a regular file")
        if stat.S_IMODE(st.st_mode) != PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a 0600 temp file beside it,
    fsync, rename. Its directory is made a private one first."""
    tmp = _written_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _written_beside(path: Path, data: bytes) -> str:
    """A temporary file beside ``path`` (its directory made private), 0600 from birth,
    holding ``data`` and synced: what the caller then puts in place."""
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # mkstemp asks for 0600, which a umask can narrow
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def read_private(path: Path) -> bytes:
    """The bytes of sand's own state file ``path``, tightened to 0600 first if an
    older sand or a hand left it looser. FileNotFoundError when it is missing."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"sand's state file {path} is not a regular file")
        if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.getuid():
            os.fchmod(fd, PRIVATE_FILE)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_rows(path: Path, version: int) -> list[Any]:
    """The ``vms`` rows of a small state file ``{"format": version, "vms": [...]}``;
    none when it is missing, unreadable or of another format (each caller checks its
    rows one by one)."""
    try:
        data = json.loads(read_private(path))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("format") != version:
        return []
    rows = data.get("vms")
    return rows if isinstance(rows, list) else []


def write_rows(path: Path, version: int, rows: list[dict[str, Any]]) -> None:
    write_private_file(path, json.dumps({"format": version, "vms": rows}, indent=2).encode())


def create_private_once(path: Path, data: bytes) -> bytes:
    """Create ``path`` holding ``data`` unless it exists; return what it holds.

    Two processes racing to create it agree on one content: the file appears
    by ``link`` (which fails if it exists), never half-written.
    """
    with contextlib.suppress(FileNotFoundError):
        return read_private(path)
    tmp = _written_beside(path, data)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return read_private(path)
