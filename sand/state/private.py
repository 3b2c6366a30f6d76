"""The one rule for host files that hold credentials (API tokens, secret
files, the drupal.org token): a regular file of this user that neither group
nor others can read or write. A looser file is refused, never "fixed" by sand,
naming the file and the command that fixes it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


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
